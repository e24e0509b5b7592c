"""Each sweep trial's model, data and Trainer, built from the sweep's config parsed once.

Building a run from the command line costs ~0.4 s, most of it jsonargparse resolving the
signatures of every class in the config (each callback's among them), and a trial would pay
it again for a handful of changed values: 10 % of a 4 s trial. Here the sweep's arguments are
parsed once; a trial copies that config, sets its values on the copy and instantiates it,
as LightningCLI would after its parse. No library offers this (LightningCLI always parses).

That is only right where setting a value gives what parsing it would (a class name, say,
is turned into a class_path by the parser): ``verify`` compares both for the space's edge
values before the first trial, and any difference sends every trial through the full parse.
The same parses refuse a space whose values the options refuse, before anything is written.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from .cli import ParseOnlyCLI, ProjectCLI, build_cli
from .search_space import SpaceError, args_of

# What LightningCLI builds from its config, and caches (config_dump: the saved
# hyper-parameters): a trial's copy of the parsed CLI builds its own.
BUILT = ("config_dump", "config_init", "model", "datamodule", "trainer")


class TrialBuilder:
    """``builder(values)``: the run of `python train.py BASE_ARGS --key=value ...`."""

    def __init__(
        self, base_args: list[str], default_config: Path, parsed: ProjectCLI | None = None
    ) -> None:
        """``parsed``: the CLI of ``base_args`` where the caller has it, built or not (one
        parse less); the builder keeps its config, not what it built."""
        self.base_args = base_args
        self.default_config = default_config
        parsed = parsed or build_cli(base_args, default_config, ParseOnlyCLI)
        self.base = copy.copy(parsed)
        for built in BUILT:
            self.base.__dict__.pop(built, None)
        self.fast = True

    def verify(self, edges: list[dict[str, Any]], extra: dict[str, Any] | None = None) -> bool:
        """Parse each of ``edges`` (with ``extra``, e.g. a trial's log folders): raise
        SpaceError if the options refuse one; keep the fast path only if it yields the config
        that parsing yields for all; return whether it is kept."""
        for edge in edges:
            values = {**edge, **(extra or {})}
            parsed = self._parse(edge, values)
            if self.fast:
                try:
                    self.fast = self._dump(self._config(values)) == self._dump(parsed.config)
                except Exception:  # any failure of the shortcut: take the full parse
                    self.fast = False
        return self.fast

    def _parse(self, edge: dict[str, Any], values: dict[str, Any]) -> ProjectCLI:
        try:
            return build_cli(self._args(values), self.default_config, ParseOnlyCLI)
        except SystemExit as exit:  # the option parser refused a value (it printed why)
            raise SpaceError(
                f"the option parser refused one of the space's values {edge} (see above): "
                "fix the distribution's bounds or choices"
            ) from exit
        except ValueError as error:  # our range checks (OptionError, ...)
            raise SpaceError(f"the space reaches a value that is refused: {error}") from None

    def __call__(self, values: dict[str, Any]) -> ProjectCLI:
        if not self.fast:
            return build_cli(self._args(values), self.default_config)
        cli = copy.copy(self.base)
        cli.config = self._config(values)
        cli.args = self._args(values)
        # What LightningCLI.__init__ does after its parse. The instantiators are bound to the
        # CLI object whose config_dump becomes the model's saved hyper-parameters: this copy.
        cli._set_seed()
        cli._add_instantiators()
        cli.before_instantiate_classes()
        ProjectCLI.instantiate_classes(cli)  # the base is parse-only; this one builds
        cli.after_instantiate_classes()
        return cli

    def _config(self, values: dict[str, Any]) -> Any:
        config = self.base.config.clone()
        for key, value in values.items():
            config[key] = copy.deepcopy(value)
        return config

    def _args(self, values: dict[str, Any]) -> list[str]:
        return [*self.base_args, *args_of(values)]

    def _dump(self, config: Any) -> str:
        return self.base.parser.dump(config, skip_none=False, skip_link_targets=False)
