"""
Local constant and local linear regression
==========================================

:class:`locus.KernelRegression` is Nadaraya–Watson regression
(``degree=0``) or local linear regression (``degree=1``, statsmodels'
``KernelReg(reg_type="ll")``), streaming on the GPU or the CPU. The local
linear fit is free of the local mean's bias at the boundaries and on slopes.
Here both are chosen by a grid search over the bandwidth.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.model_selection import GridSearchCV, KFold

import locus

rng = np.random.default_rng(1)
X = np.sort(rng.uniform(0, 4, 400))[:, None]
y = 1.5 * X[:, 0] + np.sin(3 * X[:, 0]) + 0.3 * rng.normal(size=400)
grid = np.linspace(0, 4, 300)[:, None]

fig, ax = plt.subplots(figsize=(7, 3.5))
ax.scatter(X[:, 0], y, s=4, c="0.6")
for degree in (0, 1):
    search = GridSearchCV(
        locus.KernelRegression(degree=degree), {"bandwidth": [0.05, 0.1, 0.2, 0.4]},
        cv=KFold(5, shuffle=True, random_state=0),
    ).fit(X, y)
    h = search.best_params_["bandwidth"]
    print(f"degree {degree}: bandwidth {h}, cross-validated R² {search.best_score_:.3f}")
    ax.plot(grid[:, 0], search.predict(grid), label=f"degree {degree}, bandwidth {h}")
ax.plot(grid[:, 0], 1.5 * grid[:, 0] + np.sin(3 * grid[:, 0]), "k:", label="truth")
ax.legend()
fig.tight_layout()
