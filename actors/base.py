"""``ContractActor``: the base of every shelldon actor. It checks each message at the door.

A subclass declares one handler per message class it accepts,
``receiveMsg_Ping(self, msg: Ping, sender: ActorAddress)``: the annotation of ``msg`` names the
class the door lets in. Thespian's own messages (``ActorExitRequest``, ``WakeupMessage``,
``WatchMessage``…) need no annotation. Any other message is logged and dropped. A handler that
raises is logged with context (actor, message type, turn_id) and never re-raised: Thespian would
deliver the same message again and repeat the handler's side effects.

Let it crash: after a handler raised, the actor's state is suspect, so it asks itself to exit,
dropping (and logging) every other message meanwhile; the supervisor gets ``ChildActorExited``
and starts a fresh instance whose state is rebuilt from sqlite. The supervisor itself sets
``crash_on_error = False``. Descriptors passed to ``watch`` wake the actor with a
``WatchMessage`` when readable, until ``unwatch``.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

import structlog
from thespian import actors as thespian_actors
from thespian.actors import (
    Actor,
    ActorAddress,
    ActorExitRequest,
    ActorSystemMessage,
    DeadEnvelope,
    PoisonMessage,
    ThespianWatch,
)

from actors.messages import Crash

log = structlog.get_logger(__name__)

HANDLER_PREFIX = "receiveMsg_"
# Thespian messages that, unhandled, mean something we sent never arrived: worth a warning.
_UNDELIVERABLE = (PoisonMessage, DeadEnvelope)


def _declared_class(owner: type, attr: str, handler: Any) -> type:
    """The message class ``handler`` declares through its ``msg`` annotation (or Thespian's)."""
    suffix = attr[len(HANDLER_PREFIX) :]
    params = list(inspect.signature(handler).parameters.values())
    annotation = params[1].annotation if len(params) >= 2 else inspect.Parameter.empty
    if annotation is inspect.Parameter.empty:
        system_class = getattr(thespian_actors, suffix, None)
        if isinstance(system_class, type) and issubclass(system_class, ActorSystemMessage):
            return system_class
        raise TypeError(
            f"{owner.__qualname__}.{attr}: annotate the message parameter with its class "
            f"(msg: {suffix}) so the door knows what to let in"
        )
    if isinstance(annotation, str):
        try:
            annotation = eval(annotation, handler.__globals__)  # noqa: S307
        except NameError as exc:
            raise TypeError(
                f"{owner.__qualname__}.{attr}: cannot resolve the message annotation: {exc}; "
                "import the class at module level"
            ) from None
    if not isinstance(annotation, type) or annotation.__name__ != suffix:
        raise TypeError(
            f"{owner.__qualname__}.{attr}: the message annotation must be the class {suffix}, "
            f"got {annotation!r}"
        )
    return annotation


class ContractActor(Actor):  # type: ignore[misc]
    """An actor that handles only the message classes its ``receiveMsg_<Class>`` methods declare."""

    accepted: ClassVar[dict[type, str]] = {}
    crash_on_error: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        accepted: dict[type, str] = {}
        for klass in reversed(cls.__mro__):
            for attr, member in vars(klass).items():
                if attr.startswith(HANDLER_PREFIX) and callable(member):
                    accepted[_declared_class(klass, attr, member)] = attr
        cls.accepted = accepted

    def __init__(self) -> None:
        super().__init__()
        self._watched: set[int] = set()
        self._handler_cache: dict[type, str | None] = {}
        self._crashed = False

    def receiveMsg_Crash(self, msg: Crash, sender: ActorAddress) -> None:
        raise RuntimeError(msg.why)

    def watch(self, fd: int) -> None:
        """Wake this actor with a ``WatchMessage`` whenever ``fd`` is readable."""
        self._watched.add(fd)

    def unwatch(self, fd: int) -> None:
        """Stop watching ``fd`` (do it at EOF, or the actor spins on a readable descriptor)."""
        self._watched.discard(fd)

    def _handler_name(self, message_class: type) -> str | None:
        if message_class not in self._handler_cache:
            self._handler_cache[message_class] = next(
                (self.accepted[c] for c in message_class.__mro__ if c in self.accepted), None
            )
        return self._handler_cache[message_class]

    def receiveMessage(self, message: Any, sender: ActorAddress) -> ThespianWatch | None:
        """The door: route a declared message to its handler, log and drop anything else."""
        if self._crashed and not isinstance(message, ActorExitRequest):
            log.warning(
                "message_to_crashed_actor",
                actor=type(self).__name__,
                message_type=type(message).__qualname__,
            )
            return None
        name = self._handler_name(type(message))
        if name is None:
            self._refuse(message, sender)
        else:
            turn_id = getattr(message, "turn_id", None)
            # Every actor shares the service's process: each message names its actor.
            context = {"actor": type(self).__name__}
            if turn_id is not None:
                context["turn_id"] = turn_id
            with structlog.contextvars.bound_contextvars(**context):
                try:
                    getattr(self, name)(message, sender)
                except Exception:
                    log.exception(
                        "handler_failed",
                        actor=type(self).__name__,
                        message_type=type(message).__qualname__,
                        crashes=self.crash_on_error,
                    )
                    if self.crash_on_error and not isinstance(message, ActorExitRequest):
                        self._crashed = True
                        self.send(self.myAddress, ActorExitRequest())
                        return None
        return ThespianWatch(list(self._watched)) if self._watched else None

    def _refuse(self, message: Any, sender: ActorAddress) -> None:
        kind = type(message)
        if isinstance(message, _UNDELIVERABLE):
            log.warning("message_undeliverable", actor=type(self).__name__, message=kind.__name__)
        elif isinstance(message, ActorSystemMessage):
            log.debug("system_message_unhandled", actor=type(self).__name__, message=kind.__name__)
        else:
            log.warning(
                "message_dropped",
                actor=type(self).__name__,
                message_type=f"{kind.__module__}.{kind.__qualname__}",
                sender=str(sender),
                why="not a message class this actor declares",
            )
