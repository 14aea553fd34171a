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
    locus.LocalMeanImputer(backend="cpu"),
]

# Checks that fail only because locus computes in float32.
F32 = "predictions are float32, the precision the engine computes in; the check requires float64"


def expected_failed_checks(estimator):
    if isinstance(estimator, locus.KernelRegression):
        return {"check_regressor_multioutput": F32}
    return {}


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=expected_failed_checks)
def test_sklearn_compatible(estimator, check):
    check(estimator)
