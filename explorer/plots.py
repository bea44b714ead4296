"""The explorer's figures as pure functions: a results DataFrame in, a HoloViews object out.

The notebooks, the dashboard and exported HTML draw exactly these. Every function takes the whole
results frame (``explorer.sweep(...)``, ``explorer.Store().rows()``) and optional filters; rows
that are not ``ok``, and values a log axis cannot show, are left out::

    import explorer, explorer.plots as plots
    import holoviews as hv
    hv.extension("bokeh")
    df = explorer.sweep("decay", ["dict", "array"], n_states=[10, 30, 100], targets="loss")
    plots.compile_time_plot(df, target="loss") + plots.program_size_plot(df, target="loss")
"""

from ._src.plots import REPRESENTATION_COLORS as REPRESENTATION_COLORS
from ._src.plots import STAGES as STAGES
from ._src.plots import color_of as color_of
from ._src.plots import compile_time_plot as compile_time_plot
from ._src.plots import export_html as export_html
from ._src.plots import log_ticks as log_ticks
from ._src.plots import placeholder as placeholder
from ._src.plots import program_size_plot as program_size_plot
from ._src.plots import rollout_frame as rollout_frame
from ._src.plots import rollout_plot as rollout_plot
from ._src.plots import runtime_plot as runtime_plot
from ._src.plots import select as select
from ._src.plots import compile_ranking_plot as compile_ranking_plot
from ._src.plots import run_ratio_plot as run_ratio_plot

__all__ = ["REPRESENTATION_COLORS", "STAGES", "color_of", "compile_time_plot", "export_html",
           "log_ticks", "placeholder", "program_size_plot", "rollout_frame", "rollout_plot", "runtime_plot",
           "select", "run_ratio_plot", "compile_ranking_plot"]
