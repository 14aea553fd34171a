"""
Imputing missing values, with pandas output
===========================================

:class:`locus.LocalMeanImputer` fills each missing entry with a
kernel-weighted mean of that feature over the rows that observe it, the
distances over the features both rows observe (scikit-learn's
``nan_euclidean``). It takes :class:`sklearn.impute.KNNImputer`'s arguments
(``n_neighbors=k`` gives KNNImputer's donors) and, as every scikit-learn
transformer, ``set_output(transform="pandas")``.
"""

import numpy as np
import pandas as pd
from sklearn.datasets import load_diabetes
from sklearn.impute import KNNImputer

import locus

X = load_diabetes(as_frame=True).data
rng = np.random.default_rng(0)
mask = rng.random(X.shape) < 0.15
X_missing = X.mask(mask)
print(f"{mask.sum()} of {mask.size} entries removed")

# %%
# The imputer in a DataFrame world: the output is a DataFrame with the input's
# column names (``get_feature_names_out``), and the indicator columns added by
# ``add_indicator`` are named too.
imputer = locus.LocalMeanImputer(bandwidth=0.05, add_indicator=True).set_output(
    transform="pandas"
)
filled = imputer.fit_transform(X_missing)
print(type(filled).__name__, filled.shape)
print(filled.iloc[:3, [0, 1, 2, -2, -1]].round(4))

# %%
# Error on the removed entries, against KNNImputer and the column means.
def rmse(Z: pd.DataFrame) -> float:
    diff = (np.asarray(Z)[:, : X.shape[1]] - X.to_numpy())[mask]
    return float(np.sqrt(np.mean(diff**2)))


knn = KNNImputer(n_neighbors=5).set_output(transform="pandas").fit_transform(X_missing)
means = X_missing.fillna(X_missing.mean())
local5 = locus.LocalMeanImputer(n_neighbors=5, weights="uniform").fit_transform(X_missing)
print(f"RMSE  column means      {rmse(means):.5f}")
print(f"      KNNImputer(5)     {rmse(knn):.5f}")
print(f"      locus, 5 donors   {rmse(local5):.5f}")
print(f"      locus, kernel     {rmse(filled):.5f}")
