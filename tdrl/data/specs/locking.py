"""Locking of Composite specs, with a lock graph like TensorDict's.

A locked Composite refuses to set or delete entries. Locking recursively also locks the
nested Composites and records, in each of them, which Composite locked it. A Composite
cannot be unlocked while a Composite that locked it is still locked: the same nested
spec may be part of several locked trees, and unlocking it for one of them would unlock
it behind the others' back. The check covers the whole subtree first, so a refused
unlock changes nothing.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any

__all__: list[str] = []

MSG_LOCKED = (
    "Cannot modify a locked Composite. Key {key!r} cannot be set or deleted: call unlock_() first"
)
MSG_LOCK_GRAPH = (
    "Cannot unlock a Composite that is part of a locked graph: it was locked by a "
    "Composite that is still locked. Unlock that one (recursively) first."
)


class _Lockable:
    """Lock state of a Composite: ``lock_`` / ``unlock_`` and the lock graph.

    Subclasses provide ``_children()``, the nested Composites directly held.
    """

    _locked: bool = False

    def _children(self) -> Iterator[_Lockable]:
        raise NotImplementedError

    def _lock_parents(self) -> list:
        """Weak references to the Composites that locked this one (created on demand)."""
        parents = self.__dict__.get("_lock_parent_refs")
        if parents is None:
            parents = self.__dict__["_lock_parent_refs"] = []
        return parents

    @property
    def is_locked(self) -> bool:
        """Whether entries can no longer be set or deleted."""
        return self._locked

    @property
    def locked(self) -> bool:
        """Same as :attr:`is_locked`."""
        return self._locked

    def _check_unlocked(self, key: Any) -> None:
        if self._locked:
            raise RuntimeError(MSG_LOCKED.format(key=key))

    def lock_(self, recurse: bool | None = True) -> _Lockable:
        """Forbid setting / deleting entries; ``recurse`` (default) locks nested Composites too.

        Returns ``self``.
        """
        self._locked = True
        if recurse is None or recurse:
            for child in self._children():
                parents = child._lock_parents()
                if not any(ref() is self for ref in parents):
                    parents.append(weakref.ref(self))
                child.lock_(recurse=True)
        return self

    def unlock_(self, recurse: bool | None = True) -> _Lockable:
        """Allow setting / deleting entries again (in nested Composites too by default).

        Raises a RuntimeError, and changes nothing, when this Composite or (with
        ``recurse``) a nested one is still locked by a Composite outside the unlocked set.
        Returns ``self``.
        """
        recurse = recurse is None or recurse
        targets = self._unlock_set(recurse)
        target_ids = {id(node) for node in targets}
        for node in targets:
            for ref in node._lock_parents():
                parent = ref()
                if parent is not None and parent._locked and id(parent) not in target_ids:
                    raise RuntimeError(MSG_LOCK_GRAPH)
        for node in targets:
            node._locked = False
            for child in node._children():
                child.__dict__["_lock_parent_refs"] = [
                    ref for ref in child._lock_parents() if ref() is not node and ref() is not None
                ]
        return self

    def _unlock_set(self, recurse: bool) -> list:
        if not recurse:
            return [self]
        out, seen, stack = [], set(), [self]
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            out.append(node)
            stack.extend(node._children())
        return out

    def _lock_state_for_pickle(self, state: dict) -> dict:
        """A copy of ``state`` without the weak references of the lock graph."""
        state.pop("_lock_parent_refs", None)
        return state
