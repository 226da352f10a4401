"""Which history a ``history`` command reads and with what change sensitivity: ``--lab``,
``--db``, ``--policy`` and ``--p-value`` resolved once for every history command."""

from __future__ import annotations


def lab_scope(args):
    """``--lab``'s boards, database URL and change sensitivity with ``--policy`` and
    ``--p-value`` over it (``lab/changes.py`` ``change_settings``): (devices or None, URL,
    settings), the same for ``history changes`` and ``history trend`` as for ``fleet run``."""
    from ..host.lab.changes import change_settings

    lab = policy = None
    url = args.db
    if getattr(args, "lab", None):
        from ..host.lab.inventory import load_lab

        lab = load_lab(args.lab)
        if url is None and lab.history_url:
            url = lab.history_url.read("lab history_url")
    if getattr(args, "policy", None):
        from ..host.judge.policy import load_policy

        policy = load_policy(args.policy)
    settings = change_settings(lab, policy, getattr(args, "policy", None), args.p_value)
    return ({d.name for d in lab.devices} if lab else None), url, settings
