"""Facts about a caller, per persona (docs/facts.md): `people/<user>/<persona>.md`.

- sets.py     reading a set on the turn path (cached by the file's state), judged line by
              line, and the system message it makes (templates/facts.md.j2)
- extract.py  one extraction's prompt (templates/fact_extraction.md.j2), the checks of the
              model's reply, and the difference it writes
- keeper.py   FactKeeper: what a turn is told, and the extractions run beside the turns
- callers.py  everything held about a caller, and forgetting it
"""

from sentient.facts.callers import caller, callers, forget, sessions_of
from sentient.facts.keeper import FactKeeper, Outcome, facts_read
from sentient.facts.sets import FactSet, Told, persons_messages, read_set

__all__ = ["FactKeeper", "FactSet", "Outcome", "Told", "caller", "callers", "facts_read", "forget", "persons_messages",
           "read_set", "sessions_of"]
