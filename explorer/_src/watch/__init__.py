"""Floor 5: ``explorer.watch``: every compilation of a whole program, ranked, with its cause."""

from .record import CompileRecord as CompileRecord
from .session import Watch as Watch
from .session import watch as watch
