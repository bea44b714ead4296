"""Floor 4: the figures, pure functions from a results frame to HoloViews (no Panel imported).

``sweep``: one sweep's compile time, program size, runtime and rollouts; ``runs``: whole runs (two
runs as ratios, a watched program's compile ranking); ``ticks``: readable log-axis ticks.
"""

from .runs import compile_ranking_plot as compile_ranking_plot
from .runs import run_ratio_plot as run_ratio_plot
from .sweep import PLOT_HEIGHT as PLOT_HEIGHT
from .sweep import REPRESENTATION_COLORS as REPRESENTATION_COLORS
from .sweep import STAGES as STAGES
from .sweep import color_of as color_of
from .sweep import compile_time_plot as compile_time_plot
from .sweep import export_html as export_html
from .sweep import placeholder as placeholder
from .sweep import program_size_plot as program_size_plot
from .sweep import rollout_frame as rollout_frame
from .sweep import rollout_plot as rollout_plot
from .sweep import runtime_plot as runtime_plot
from .sweep import select as select
from .ticks import log_ticks as log_ticks
