"""Calibration: the performance model against measurements, and a fit of its efficiencies.

Three pieces, all pure functions over plain data:

- **Figures** (``figures``). A ``Figure`` is one measured number with its conditions (model,
  hardware, chips, precision, scenario, batch, prompt and output tokens, metric, value, unit).
  The public set is ``backends/data/measurements/published.toml`` (``load_published``);
  ``fastmode calibrate`` builds figures from a ``fastmode bench --json`` report.
  ``predict_figure`` evaluates the same figure with the model: a static batch
  (``perf.static_batch``) or a closed-loop serving benchmark (``perf.serving_steady_state``),
  in the figure's unit. A placement that does not fit is a refusal (``None``).
- **Fit** (``fit``). ``fit`` adjusts the efficiency parameters of each hardware profile
  (``FIT_PARAMS``) to minimise the weighted squared log errors of its figures plus a weak pull
  towards the hand-set estimates, by coordinate search: one parameter at a time, a golden-
  section search over its (log) range, repeated until nothing moves. Deterministic, no scipy.
  ``cross_validate`` refits without one source at a time and predicts that source's figures
  (leave-one-source-out), which is what the error on unseen measurements looks like.
- **Profiles** (``profile_io``): the fitted values as a ``[hardware.NAME]`` fragment or written
  into hardware.toml.

See docs/calibration.md.
"""

from .figures import *  # noqa: F403
from .figures import __all__ as _figures
from .fit import *  # noqa: F403
from .fit import __all__ as _fit
from .profile_io import *  # noqa: F403
from .profile_io import __all__ as _io

__all__ = [*_figures, *_fit, *_io]
