"""Calibration: the performance model against measurements, and a fit of its efficiencies.

Five pieces, all pure functions over plain data:

- **Figures** (``figures``). A ``Figure`` is one measured number with its conditions (model,
  hardware, chips, precision, scenario, batch, prompt and output tokens, metric, value, unit).
  The public set is ``fastmode/backends/data/measurements/published.toml`` (``load_published``);
  ``fastmode calibrate`` builds figures from a ``fastmode bench --json`` report.
  ``predict_figure`` evaluates the same figure with the model: a static batch
  (``perf_serving.static_batch``) or a closed-loop serving benchmark (``perf_serving.serving_steady_state``),
  in the figure's unit. A placement that does not fit is a refusal (``None``).
- **Fit** (``fit``). ``fit`` adjusts the efficiency parameters of each hardware profile
  (``FIT_PARAMS``) and the engines' terms to minimise the weighted squared log errors of the
  figures plus a weak pull towards the hand-set estimates, by coordinate search: one parameter
  at a time, a golden-section search over its (log) range, repeated until nothing moves.
  Deterministic, no scipy. Figures of a regime the model does not model (``scope``: MoE runs
  with thousands of sequences queued) are scored, not fitted.
- **Engines** (``engines``): the software terms of a measurement (request and step
  overheads, GQA KV reads, kernel efficiency scales), one profile per engine generation in
  ``fastmode/backends/data/engines.toml``, matched by a figure's ``engine``; fitted in the pooled stage.
- **Cross-validation** (``crossval``): leave one source out, refit everything from the priors,
  predict it.
- **Profiles** (``profile_io``): the fitted values as a ``[hardware.NAME]`` fragment or written
  into hardware.toml and engines.toml.

See docs/calibration.md.
"""

from fastmode.backends.calibrate.crossval import *  # noqa: F403
from fastmode.backends.calibrate.crossval import __all__ as _cv
from fastmode.backends.calibrate.engines import *  # noqa: F403
from fastmode.backends.calibrate.engines import __all__ as _engines
from fastmode.backends.calibrate.figures import *  # noqa: F403
from fastmode.backends.calibrate.figures import __all__ as _figures
from fastmode.backends.calibrate.fit import *  # noqa: F403
from fastmode.backends.calibrate.fit import __all__ as _fit
from fastmode.backends.calibrate.profile_io import *  # noqa: F403
from fastmode.backends.calibrate.profile_io import __all__ as _io
from fastmode.backends.calibrate.scope import *  # noqa: F403
from fastmode.backends.calibrate.scope import __all__ as _scope

__all__ = [*_figures, *_fit, *_cv, *_engines, *_io, *_scope]
