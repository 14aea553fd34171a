"""scikit-learn's own estimator checks, on every estimator."""

import pytest

import locus

pytest.importorskip("sklearn")
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

ESTIMATORS = [
    locus.MeanShift(backend="cpu"),
    locus.KernelDensity(backend="cpu"),
    locus.KernelRegression(backend="cpu"),
    locus.LocalModeClassifier(backend="cpu"),
    locus.KNeighborsClassifier(backend="cpu"),
    locus.KNeighborsRegressor(backend="cpu"),
    locus.NearestNeighbors(backend="cpu"),
    locus.LocalMeanImputer(backend="cpu"),
]


# The one check left failing: float32 kernel sums (accumulated by the
# engine in its own order) make a point of weight 2 and a repeated point
# agree to about 1e-6 relative; the check asks 1e-7.
F32_SUMS = (
    "kernel weights are summed by the engine in float32 blocks: weighted and repeated "
    "points agree to ~1e-6 relative, the check asks 1e-7"
)


def expected_failed_checks(estimator):
    if isinstance(estimator, locus.LocalModeClassifier):
        return {"check_sample_weight_equivalence_on_dense_data": F32_SUMS}
    return {}


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=expected_failed_checks)
def test_sklearn_compatible(estimator, check):
    check(estimator)
