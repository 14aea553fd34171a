"""
A k-nearest-neighbour classifier in a Pipeline and a grid search
================================================================

:class:`locus.KNeighborsClassifier` is a scikit-learn estimator: it clones,
pickles, and goes into a :class:`~sklearn.pipeline.Pipeline` searched by
:class:`~sklearn.model_selection.GridSearchCV` exactly as
:class:`sklearn.neighbors.KNeighborsClassifier` does, with the same
constructor arguments (``n_jobs``, ``algorithm`` and ``leaf_size`` are
accepted; the search is brute force and exact).
"""

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.neighbors import KNeighborsClassifier as SkKNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import locus

X, y = load_digits(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0)

pipe = make_pipeline(
    StandardScaler(), locus.KNeighborsClassifier(n_jobs=-1, algorithm="brute")
)
search = GridSearchCV(
    pipe,
    {
        "kneighborsclassifier__n_neighbors": [1, 3, 5, 9],
        "kneighborsclassifier__weights": ["uniform", "distance"],
    },
    cv=3,
)
search.fit(X_train, y_train)
print("best parameters:", search.best_params_)
print(f"cross-validated accuracy: {search.best_score_:.3f}")
print(f"test accuracy: {search.score(X_test, y_test):.3f}")

# %%
# The same pipeline with scikit-learn's classifier predicts the same labels.
best = search.best_params_
sk = make_pipeline(
    StandardScaler(),
    SkKNeighborsClassifier(
        n_neighbors=best["kneighborsclassifier__n_neighbors"],
        weights=best["kneighborsclassifier__weights"],
    ),
).fit(X_train, y_train)
agree = np.mean(sk.predict(X_test) == search.predict(X_test))
print(f"labels equal to scikit-learn's on {agree:.1%} of the test set")

# %%
# ``kneighbors`` returns ``(distances, indices)``, as scikit-learn's and
# faiss's do, as a named tuple.
knn = search.best_estimator_[-1]
dist, idx = knn.kneighbors(search.best_estimator_[0].transform(X_test[:2]), n_neighbors=3)
print(dist.round(3))
print(idx)
