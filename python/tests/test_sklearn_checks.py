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


@parametrize_with_checks(ESTIMATORS)
def test_sklearn_compatible(estimator, check):
    check(estimator)
