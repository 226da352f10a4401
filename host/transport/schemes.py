"""The device address schemes, each declared once: how an address is recognised, what it
looks like in messages, which transport opens it, and what it carries (TLS, a token, a
lease). Every other list of schemes (``open_transport``, the hints naming the forms,
which addresses take TLS or a token, which hold a lease) is derived from :data:`SCHEMES`.
Each transport parses the rest of its own address (``grpc.normalize_address``,
``ssh_target.parse_ssh_url``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scheme:
    """One kind of device address."""

    name: str
    prefix: str
    """``grpc://``; a scheme without ``://`` is the whole address (``local``)."""
    form: str
    """The address as messages show it: ``grpc://HOST:PORT``."""
    transport: str
    """``module:Class`` in ``edgequal.host.transport``, imported when it is opened."""
    tls: bool = False
    """It takes TLS files (``--tls-ca``, a device's ``tls_*``)."""
    token: bool = False
    """The agent is reached with a bearer token (not an SSH key)."""
    leases: bool = False
    """A host takes the device's lease over it (others may share the agent)."""
    remote: bool = True
    """It names another machine (``devices trust``, ``agent status``)."""
    docs: str = ""

    def matches(self, address: str) -> bool:
        """Whether ``address`` is of this scheme."""
        if self.prefix.endswith("://"):
            return address.startswith(self.prefix)
        return address == self.prefix

    def rest(self, address: str) -> str:
        """The address without its scheme: ``pi@bench`` of ``ssh://pi@bench``."""
        return address.removeprefix(self.prefix)


LOCAL = Scheme(
    "local",
    "local",
    "local",
    "local:LocalTransport",
    remote=False,
    docs="an agent on 127.0.0.1, started by edgequal or already serving its state directory",
)
GRPC = Scheme(
    "grpc",
    "grpc://",
    "grpc://HOST:PORT",
    "grpc:GrpcTransport",
    tls=True,
    token=True,
    leases=True,
    docs="a serving agent: token or mutual TLS, leases shared by many hosts",
)
SSH = Scheme(
    "ssh",
    "ssh://",
    "ssh://USER@HOST",
    "ssh:SSHTransport",
    docs="edgequal-agent run-plan over an SSH exec channel (known_hosts, RejectPolicy)",
)
SCHEMES: tuple[Scheme, ...] = (LOCAL, GRPC, SSH)
REMOTE: tuple[Scheme, ...] = tuple(s for s in SCHEMES if s.remote)


def scheme_of(address: str) -> Scheme | None:
    """The scheme of ``address``, None when it has none of them (a device name)."""
    return next((s for s in SCHEMES if s.matches(address)), None)


def is_scheme(address: str, scheme: Scheme) -> bool:
    """Whether ``address`` is a ``scheme`` address."""
    return scheme.matches(address)


def takes_tls(address: str) -> bool:
    """Whether TLS files apply to ``address``."""
    scheme = scheme_of(address)
    return scheme is not None and scheme.tls


def forms(schemes: tuple[Scheme, ...] = REMOTE, joiner: str = " or ") -> str:
    """The address forms of ``schemes`` for a message: ``grpc://HOST:PORT or ssh://USER@HOST``."""
    return joiner.join(s.form for s in schemes)
