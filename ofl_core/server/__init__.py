"""The server API every method builds on, and that imports no method: what a server receives
and returns (:class:`ServerContext`, :class:`ServerResult`), how a method declares itself
(:class:`MethodSpec`, :class:`MethodKind`) and parameter averaging. Client uploads are
:class:`ofl_core.uploads.ClientUpload`."""

from .averaging import average_states
from .context import ServerContext, ServerResult, check_homogeneous
from .spec import GENERATOR_BN, MODEL, SHARED_INIT, MethodKind, MethodSpec

__all__ = ["GENERATOR_BN", "MODEL", "SHARED_INIT", "MethodKind", "MethodSpec", "ServerContext",
           "ServerResult", "average_states", "check_homogeneous"]
