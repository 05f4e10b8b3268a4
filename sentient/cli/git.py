"""`sentient sync` and `sentient resolve`: the vault's git remote, and the conflicts a sync keeps."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from sentient.cli.common import plural

if TYPE_CHECKING:
    from sentient.vault.sync import ConflictCopy
    from sentient.workspace import Workspace


def add_parser(sub: Any) -> None:
    sync = sub.add_parser("sync", help="fetch, merge and push the vault's git remote (git.remote)")
    sync.add_argument("--json", action="store_true")
    sync.set_defaults(handler=cmd_sync)
    resolve = sub.add_parser("resolve", help="settle a conflicting edit a sync kept both ways")
    resolve.add_argument("id", help="a memory entry's id, or note:ID, plan:ID, skill:ID ...")
    resolve.add_argument("--keep", choices=("mine", "theirs", "both"), required=True,
                         help="mine: the file as it is; theirs: the other side in its place; both: the other side "
                              "as a new entry")
    resolve.set_defaults(handler=cmd_resolve)


def cmd_sync(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.conflicts import as_dict, sync_vault
    done = sync_vault(workspace)
    if args.json:
        print(json.dumps({**done.as_dict(), "conflicts": [as_dict(copy) for copy in done.conflicts]}, indent=2))
        return 1 if done.conflicts else 0
    pushed = "pushed" if done.pushed else "nothing to push"
    print(f"synced {done.branch} with {done.remote}: {done.merged}, {pushed}")
    if done.conflicts:
        show_conflicts(done.conflicts, f"{plural(len(done.conflicts), 'file')} changed on both sides in the same "
                       "lines; both versions are kept and neither is shown to the model until you resolve it:")
        return 1
    return 0


def show_conflicts(conflicts: list[ConflictCopy], heading: str) -> None:
    """Each conflict a sync kept, with the command that settles it (sync's and doctor's report)."""
    from sentient.conflicts import ref_of
    print(heading)
    for copy in conflicts:
        print(f"  {copy.original}: theirs ({copy.host}, {copy.time}) is {copy.copy}")
        print(f"      keep one: sentient resolve {ref_of(copy)} --keep mine|theirs|both")


def cmd_resolve(args: argparse.Namespace, workspace: Workspace) -> int:
    from sentient.conflicts import resolve
    done = resolve(workspace, args.id, args.keep)
    kept = f"both (theirs is now {done.new_id})" if done.new_id else args.keep
    print(f"resolved {args.id}: kept {kept}; removed {', '.join(done.removed)}")
    return 0
