"""The terminal during a run: one line per stage at its start, one live progress line per stage, warnings once.

At the default verbosity a stage opens with one line (what runs, steps, device), then one progress line
(step/total, ETA, s/step, rewards, the latest validation accuracy) rewritten in place on a terminal or
printed every `every` steps when piped. TRL's metric dictionaries and per-step lines go to train.log and
metrics.jsonl only, library progress bars are off, and a warning is shown once. `--quiet`: warnings and
errors only; `--verbose`: everything. Wiring: `setup()` once (the CLI does), `callbacks(stage)` into a
trainer's callbacks, and `adopt(trainer)` after building it.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import time
from typing import Any, TextIO

QUIET, NORMAL, VERBOSE = "quiet", "normal", "verbose"
_CLEAR = "\r\x1b[K"  # carriage return, erase to the end of the line
# What a terminal acts on instead of showing: C0 controls but tab and newline (ESC starts CSI/OSC sequences:
# cursor moves, clear screen, OSC 52 clipboard writes), DEL, C1 controls (8-bit CSI and OSC), and the
# bidirectional controls that reorder what is shown.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    r"""`text` with every terminal control character written as its escape (`\x1b`), so model output
    printed to a terminal stays data: it cannot clear the screen, move the cursor or set the clipboard.

    >>> print(printable("42\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\x9b2J ok"))
    42\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J\x9b2J ok
    """
    return _CONTROL.sub(lambda match: ascii(match.group())[1:-1], text)


class Console:
    def __init__(self, verbosity: str = NORMAL, stream: TextIO | None = None, every: int | None = None) -> None:
        self.verbosity = verbosity
        self._stream = stream  # None: sys.stderr at the time of writing (it may be replaced, as under pytest)
        self.every = every
        self.live: str | None = None  # the line being rewritten in place (terminal only)
        self.sticky = False  # a stage's progress line is redrawn under other lines; an eval's is not

    @property
    def stream(self) -> TextIO:
        return self._stream or sys.stderr

    @property
    def tty(self) -> bool:
        return bool(getattr(self.stream, "isatty", lambda: False)())

    def line(self, text: str) -> None:
        """A whole line; on a terminal it goes above the live line, which is redrawn if it belongs to a stage.
        Control characters in `text` are escaped (`printable`)."""
        out, text = self.stream, printable(text)
        if self.tty and self.live is not None:
            out.write(_CLEAR + text + "\n")
            if self.sticky:
                out.write(self.live)
            else:
                self.live = None
        else:
            out.write(text + "\n")
        out.flush()

    def progress(self, text: str, sticky: bool = True) -> None:
        """Rewrite the live line on a terminal; print it as a line elsewhere. Control characters are escaped."""
        text = printable(text)
        if not self.tty:
            self.line(text)
            return
        self.live, self.sticky = text, sticky
        self.stream.write(_CLEAR + text)
        self.stream.flush()

    def end_progress(self) -> None:
        """Keep the live line's last state on screen and move below it."""
        if self.tty and self.live is not None:
            self.stream.write("\n")
            self.stream.flush()
        self.live, self.sticky = None, False


class ConsoleHandler(logging.Handler):
    """Log records to the console: grpokit's own INFO lines, everyone's warnings (each text once)."""

    def __init__(self, console: Console) -> None:
        super().__init__(logging.DEBUG)
        self.console = console
        self.seen: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if not self._shown(record):
                return
            message = record.getMessage()
            if record.name == "py.warnings" and self.console.verbosity != VERBOSE:
                message = _short_warning(message)
            if record.levelno >= logging.WARNING:
                if message in self.seen and self.console.verbosity != VERBOSE:
                    return  # said once already; train.log keeps every repeat
                self.seen.add(message)
            if getattr(record, "live", False) and self.console.verbosity != VERBOSE:
                self.console.progress(message, sticky=False)
                return
            stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
            if self.console.verbosity == VERBOSE:
                text = f"{stamp} {record.levelname} {record.name}: {message}"
            elif record.levelno >= logging.WARNING:
                text = f"{stamp} {record.levelname.lower()}: {message}"
            elif message.startswith("\n"):  # a table: its own lines, no stamp
                text = message[1:]
            else:
                text = f"{stamp} {message}"
            if record.exc_info and self.console.verbosity == VERBOSE:
                text += "\n" + logging.Formatter().formatException(record.exc_info)
            self.console.line(text)
        except Exception:  # a console must never end a run
            self.handleError(record)

    def _shown(self, record: logging.LogRecord) -> bool:
        verbosity = self.console.verbosity
        if verbosity == VERBOSE:
            return True
        if getattr(record, "console", True) is False:  # per-step lines: train.log only
            return False
        if record.name == "py.warnings" and re.search(r": (FutureWarning|DeprecationWarning): ", record.getMessage()):
            return False  # libraries' notes to their developers; train.log keeps them
        if record.levelno >= logging.WARNING:
            return True
        return verbosity == NORMAL and record.levelno >= logging.INFO and record.name.startswith("grpokit")


def _short_warning(formatted: str) -> str:
    r"""'path/x.py:12: UserWarning: text\n  source line' -> 'UserWarning: text (x.py:12)'.

    >>> _short_warning("/a/b/loader.py:759: UserWarning: pin_memory is set\n  super().__init__(loader)\n")
    'UserWarning: pin_memory is set (loader.py:759)'
    """
    match = re.match(r"(?s)(.*?):(\d+): (\w+): (.*?)\n", formatted)
    if not match:
        return formatted.strip()
    path, line, category, text = match.groups()
    return f"{category}: {text} ({path.rsplit('/', 1)[-1]}:{line})"


_active: Console | None = None


def active() -> Console | None:
    return _active


def setup(verbosity: str = NORMAL, stream: TextIO | None = None, every: int | None = None) -> Console:
    """Route logging to a Console (replacing an earlier one) and quiet other libraries' bars and chatter."""
    global _active
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, ConsoleHandler):
            root.removeHandler(handler)
    console = Console(verbosity, stream, every)
    root.addHandler(ConsoleHandler(console))
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)  # Python warnings: to train.log, and once to the console
    _route_library_logs(verbose=verbosity == VERBOSE)
    _active = console
    return console


def _route_library_logs(verbose: bool) -> None:
    try:
        # slow import: transformers, only when a console is set up (the CLI imports this module at start)
        import transformers

        # transformers prints through its own handler; send its records to ours (and train.log) instead.
        transformers.utils.logging.disable_default_handler()
        transformers.utils.logging.enable_propagation()
        if not verbose:
            transformers.utils.logging.disable_progress_bar()
    except ImportError:
        pass
    if verbose:
        return
    for module in ("datasets", "huggingface_hub.utils"):
        with contextlib.suppress(ImportError, AttributeError):
            __import__(module, fromlist=["disable_progress_bars"]).disable_progress_bars()


def callbacks(stage: str) -> list[Any]:
    """[the stage's progress callback] when a console is set up and not verbose, else []."""
    if _active is None or _active.verbosity == VERBOSE:
        return []
    return [ConsoleProgress(_active, stage).callback()]


def adopt(trainer: Any) -> None:
    """Remove transformers' own progress printer (tqdm bar and metric dicts) where grpokit's progress is in."""
    # slow import: transformers, only once a trainer is built (the CLI imports this module at start)
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    handler = trainer.callback_handler
    if any(getattr(cb, "grpokit_console", False) for cb in handler.callbacks):
        for cls in (ProgressCallback, PrinterCallback):
            handler.remove_callback(cls)


class ConsoleProgress:
    """The stage line at the start and the progress line after each logged step, for one trainer."""

    def __init__(self, console: Console, stage: str) -> None:
        self.console, self.stage = console, stage
        self.logs: dict[str, float] = {}
        self.heldout: tuple[int, float] | None = None
        self.t0 = time.perf_counter()
        self.first_step = 0
        self.printed_at = 0

    def stage_line(self, args: Any, state: Any, model: Any) -> str:
        steps = state.max_steps
        if hasattr(args, "num_generations"):  # GRPO
            per_step = args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
            what = f"{per_step // args.num_generations} prompts x {args.num_generations} completions"
        else:
            what = f"{args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size} examples"
        precision = "bf16" if args.bf16 else "fp16" if args.fp16 else "fp32"
        on = f"{args.device.type}" + (f" x{args.world_size}" if args.world_size > 1 else "")
        text = f"{self.stage}: {steps} steps of {what}, on {on} ({precision})"
        if model is not None:
            total = sum(p.numel() for p in model.parameters())
            trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
            name = getattr(getattr(model, "config", None), "name_or_path", "") or ""
            text += f", training {trainable / 1e6:.2f}M of {total / 1e6:.1f}M parameters"
            if name:
                text += f" of {name}"
        return text

    def progress_line(self, state: Any) -> str:
        step, total = state.global_step, state.max_steps
        done = max(step - self.first_step, 1)
        rate = (time.perf_counter() - self.t0) / done
        eta = rate * (total - step)
        parts = [f"{self.stage} {step}/{total}", f"ETA {_duration(eta)}", f"{rate:.1f} s/step"]
        if "reward" in self.logs:
            rewards = [
                f"{k.split('/')[1]} {v:.2f}"
                for k, v in self.logs.items()
                if k.startswith("rewards/") and k.endswith("/mean")
            ]
            parts.append(f"reward {self.logs['reward']:.3f}" + (f" ({', '.join(rewards[:3])})" if rewards else ""))
        elif "loss" in self.logs:
            parts.append(f"loss {self.logs['loss']:.4f}")
        if self.heldout is not None:
            parts.append(f"validation {100 * self.heldout[1]:.1f}% (step {self.heldout[0]})")
        return "  ".join(parts)

    def _due(self, state: Any) -> bool:
        if self.console.tty or state.global_step >= state.max_steps:
            return True
        every = self.console.every or max(1, state.max_steps // 10)
        return state.global_step - self.printed_at >= every

    def callback(self) -> Any:
        # slow import: transformers, only once a trainer is built (the CLI imports this module at start)
        from transformers import TrainerCallback

        outer = self

        class _Callback(TrainerCallback):
            grpokit_console = True

            def on_train_begin(self, args, state, control, model=None, **kwargs):
                if not state.is_world_process_zero:
                    return
                outer.t0, outer.first_step = time.perf_counter(), state.global_step
                outer.printed_at = state.global_step
                outer.console.line(outer.stage_line(args, state, model))

            def on_log(self, args, state, control, logs=None, **kwargs):
                if not logs or not state.is_world_process_zero:
                    return
                if "eval/accuracy" in logs:
                    outer.heldout = (state.global_step, logs["eval/accuracy"])
                numbers = {k: v for k, v in logs.items() if isinstance(v, int | float)}
                if "reward" in numbers or "loss" in numbers:
                    outer.logs = numbers
                if outer._due(state) and ("reward" in numbers or "loss" in numbers or "eval/accuracy" in numbers):
                    outer.printed_at = state.global_step
                    outer.console.progress(outer.progress_line(state))

            def on_train_end(self, args, state, control, **kwargs):
                if not state.is_world_process_zero:
                    return
                outer.console.end_progress()
                minutes = (time.perf_counter() - outer.t0) / 60
                outer.console.line(f"{outer.stage}: done, {state.global_step} steps in {minutes:.1f} min")

        return _Callback()


def _duration(seconds: float) -> str:
    """
    >>> _duration(42), _duration(150), _duration(7300)
    ('42 s', '2.5 min', '2.0 h')
    """
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
