"""``edgequal.connect`` and :class:`Device`: a device whose identity is proved, and the
qualifications run on it.

``connect`` resolves a device exactly as the CLI's ``--device`` does
(``host/devices/resolve.py``: ``local``, a trusted NAME, ``grpc://``, ``ssh://``): the
device proves it holds its pinned key before a token, model or golden set is sent.
Nothing here prints; progress goes to the callbacks given.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from edgequal.host.errors import HostError, UsageError
from edgequal.host.transport.schemes import LOCAL, is_scheme, scheme_of
from edgequal.host.transport.ssh_options import SSHOptions

from .report import Report

if TYPE_CHECKING:
    from edgequal.contract.plan import Plan
    from edgequal.host.devices.profiles import DeviceProfile
    from edgequal.host.devices.resolve import OpenDevice

ProgressCallback = Callable[[dict], None]
"""Receives each progress event as the agent streams it (``type``, ``phase``, ``state``…)."""

_DURATION_FIELDS = {"sustain": "sustain_s", "window": "window_s", "latency": "latency_min_s"}
"""Plan fields a caller may give as a duration text (``sustain="2m"``)."""


@contextlib.contextmanager
def host_errors() -> Iterator[None]:
    """Turn the agent package's errors (raised by the shared plan and golden-set rules) into
    the host's, so a library caller catches one root: :class:`edgequal.Error`."""
    from edgequal.contract.errors import AgentError

    try:
        yield
    except AgentError as e:
        cls = UsageError if e.exit_code == 2 else HostError
        raise cls(str(e), hint=e.hint) from e


def plan_fields(fields: Mapping) -> dict:
    """Keyword plan fields as ``make_plan`` takes them: ``sustain``, ``window`` and
    ``latency`` (or any ``*_s`` field) may be a duration text such as ``"2m"``; ``policy``
    (a gate policy file) commits that policy's sha256 in the signed plan
    (``policy_sha256``, docs/gating.md "A policy committed before the run")."""
    from edgequal.contract.cli_args import parse_duration_s

    out = {}
    for key, value in fields.items():
        if key == "policy":
            from edgequal.host.judge.policy import load_policy

            key, value = "policy_sha256", load_policy(value).sha256 if value else None
        key = _DURATION_FIELDS.get(key, key)
        if key.endswith("_s") and isinstance(value, str):
            value = parse_duration_s(value)
        out[key] = value
    return out


def default_report_path(model: Path) -> Path:
    """Where a report goes when no path is given: the host's reports dir, never the cwd
    (a name another report already has is not reused: ``runs.write_report``)."""
    from edgequal.host.paths import reports_dir

    return reports_dir() / f"{Path(model).stem}-{time.strftime('%Y%m%dT%H%M%S')}.report.json"


class Device:
    """A device reached and proved: its transport, its name in ``known_devices``, the
    address used. Close it (or use ``with``) to drop the connection (and the local agent's)."""

    def __init__(self, opened: OpenDevice):
        self._opened = opened
        self._info: dict | None = None

    @property
    def name(self) -> str:
        """The device's name in ``known_devices``."""
        return self._opened.name

    @property
    def address(self) -> str:
        """The address it was reached at (``local``, ``grpc://…``, ``ssh://…``)."""
        return self._opened.address

    @property
    def unrecorded(self) -> bool:
        """Found by the key it proved at an address that is none of its recorded ones (not
        added: ``edgequal devices trust NAME ADDRESS`` adds it)."""
        return self._opened.unrecorded

    @property
    def transport(self):
        """The transport (``host/transport/``) this device is reached through."""
        return self._opened.transport

    @property
    def known(self):
        """The trust store (``KnownDevices``) the device was checked against."""
        return self._opened.known

    def info(self) -> dict:
        """The agent's Info: fingerprint, runtimes, key, busy state (asked once)."""
        if self._info is None:
            self._info = self.transport.info()
        return self._info

    def profile(self, name: str | Path | None = None) -> DeviceProfile | None:
        """The device profile: ``name`` when given, else the one the fingerprint matches;
        none for the local agent (the machine you sit at is not a target board)."""
        from edgequal.host.devices.profiles import load_profile, match_profile

        if name:
            return load_profile(name)
        if is_scheme(self.address, LOCAL):
            return None
        return match_profile(self.info().get("fingerprint") or {})

    def plan(self, preset: str = "quick", *, profile: str | Path | None = None, **fields) -> Plan:
        """The plan a run here uses: the preset, then the profile's board fields, then
        ``fields`` (plan field names; None values are ignored; see :func:`plan_fields`)."""
        from edgequal.contract.plan import make_plan

        with host_errors():
            chosen = self.profile(profile)
            board = chosen.plan_fields(preset) if chosen is not None else None
            return make_plan(preset, board, **plan_fields(fields))

    def qualify(
        self,
        model: str | Path,
        golden: str | Path | None = None,
        *,
        plan: str | Plan = "quick",
        profile: str | Path | None = None,
        out: str | Path | None = None,
        on_progress: ProgressCallback | None = None,
        on_notice: Callable[[str], None] | None = None,
        allow_golden_mismatch: bool = False,
        coload_models: Mapping[str, Path] | None = None,
        holder: str = "",
        model_signature: str | Path | None = None,
        command: Sequence[str] | None = None,
        **fields,
    ) -> Report:
        """Qualify ``model`` here and return the verified :class:`Report`.

        ``plan`` is a preset name (``quick``, ``standard``, ``soak``) refined by the
        profile and ``fields`` (see :meth:`plan`), or a :class:`Plan` used as it is. The
        signed envelope is written to ``out`` (default: the host's reports directory).
        ``on_progress`` gets every progress event; ``on_notice`` one-line notices during
        the run (a cancel in progress). ``model_signature`` is the model's OMS signature
        file, verified on the device before the model is loaded (docs/security.md "Model
        signatures"). Beside the report goes its sidecar (``NAME.reproduce``: where
        the artifacts are, ``edgequal rerun``'s command, and ``command``, the command line
        that ran this when there is one, argv without the program). Raises
        :class:`edgequal.Error` subclasses.
        """
        from edgequal.contract.plan import Plan
        from edgequal.host.devices.qualify import qualify
        from edgequal.host.model_file import check_model_file

        model = Path(model)
        check_model_file(model)  # a file that is no model is refused before anything is sent
        if model_signature is not None:
            from edgequal.host.model_file import check_model_signature_file

            check_model_signature_file(Path(model_signature))
        with host_errors():
            if not isinstance(plan, Plan):
                plan = self.plan(plan, profile=profile, **fields)
            elif fields or profile:
                raise UsageError("give plan fields or a profile with a preset name, not a Plan")
            done = qualify(
                self.transport,
                model,
                Path(golden) if golden else None,
                plan,
                known=self.known,
                device_name=self.name,
                on_event=on_progress or (lambda e: None),
                out=Path(out) if out else default_report_path(model),
                fresh_out=not out,
                holder=holder,
                allow_golden_mismatch=allow_golden_mismatch,
                on_notice=on_notice or (lambda text: None),
                coload_models=coload_models,
                model_signature=Path(model_signature) if model_signature else None,
                command=command,
            )
        # qualify() recorded the nonce this host issued (as for a fleet run's reports).
        return Report(done.report, done.envelope, done.path, tuple(done.notes), done.interrupted)

    @contextlib.contextmanager
    def lease(self, purpose: str, ttl_s: float = 120.0, wait_s: float | None = 0.0):
        """Hold the device's lease (renewed every third of ``ttl_s``) for the block, so no
        other host measures on it meanwhile; a device reached without leases (ssh://,
        the local agent) runs one measurement at a time by itself and holds none.
        ``wait_s``: 0 fails fast with DeviceBusy naming the holder, None waits."""
        if not scheme_of(self.address) or not scheme_of(self.address).leases:
            yield None
            return
        from edgequal.host.lab.leases import LeaseKeeper

        lease = self.transport.acquire_lease(purpose, ttl_s, wait_s=wait_s)
        keeper = LeaseKeeper(self.transport, ttl_s)
        try:
            yield lease
        finally:
            keeper.stop()
            with contextlib.suppress(HostError):  # gone with the device: it expires by itself
                self.transport.release_lease()

    def close(self) -> None:
        """Drop the connection."""
        self.transport.close()

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Device({self.name!r} at {self.address})"


def connect(
    device: str = "local",
    *,
    token_file: str | Path | None = None,
    token: str | None = None,
    known_hosts: str | Path | None = None,
    agent_cmd: str | None = None,
    ssh_key: str | Path | None = None,
    ssh: SSHOptions | None = None,
    tls_ca: str | Path | None = None,
    tls_cert: str | Path | None = None,
    tls_key: str | Path | None = None,
    known=None,
    name: str | None = None,
) -> Device:
    """Reach ``device`` (``local``, a trusted NAME, ``grpc://HOST:PORT`` or
    ``ssh://USER@HOST``) as ``--device`` does, and return it once it proved its pinned key.

    ``token`` (the token itself), else ``token_file`` (else ``$EDGEQUAL_TOKEN``, else the
    device's entry) authorizes the
    calls; ``tls_*`` are the PEM files of a grpc:// device; ``known_hosts``, ``ssh_key``
    and ``agent_cmd`` serve ssh://, or ``ssh``, an ``SSHOptions`` holding them and the rest
    of the SSH settings (a lab file's device has one; not with those three). ``known`` is the trust store (default: this host's).
    ``name`` binds the connection and its token to one device: ``device`` is then an address
    of it, where the agent must prove the key pinned for ``name`` (a lab file's entry
    ``[devices.NAME] address = …``); nothing is sent when it does not.
    """
    from edgequal.host.devices.resolve import open_device, tls_options

    def path(p):
        return Path(p) if p is not None else None

    loose = {"known_hosts": known_hosts, "ssh_key": ssh_key, "agent_cmd": agent_cmd}
    given = [k for k, v in loose.items() if v is not None]
    if ssh is not None and given:
        raise UsageError(
            f"connect: give ssh=SSHOptions(...) or {given[0]}=, not both",
            hint="put every SSH setting in the SSHOptions",
        )
    with host_errors():
        tls = tls_options(path(tls_ca), path(tls_cert), path(tls_key)) or None
        opened = open_device(
            device,
            path(token_file),
            ssh
            if ssh is not None or not given
            else SSHOptions(known_hosts, ssh_key, agent_cmd=agent_cmd),
            known=known,
            tls=tls,
            token=token,
            name=name,
        )
    return Device(opened)
