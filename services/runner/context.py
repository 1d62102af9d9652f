"""What every runner handler needs: the bus, settings, warehouses and an identity."""

from __future__ import annotations

from dataclasses import dataclass, field

from jetdbt.services.runner.admission.runner_share import RunnerShare
from jetdbt.services.runner.process.containment import Containment
from jetdbt.services.runner.setup import own_database
from jetdbt.services.runner.setup.masking import Masker
from jetdbt.services.runner.setup.secrets import Resolver, load_variables
from jetdbt.services.runner.setup.warehouses import Warehouse, load_warehouses
from jetdbt.shared.bus.connection import Bus
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.process.config import Settings

__all__ = ["RunnerContext"]


@dataclass
class RunnerContext:
    """`database_url` is jetdbt's own database (settings.database_url when not given, the
    embedded one a stack started): no warehouse may reach it (setup/own_database.py)."""

    bus: Bus
    settings: Settings
    warehouses: dict[str, Warehouse] = field(default_factory=dict)
    name: str = ""
    masker: Masker = field(default_factory=Masker)
    containment: Containment | None = None
    database_url: str = ""
    own_database: own_database.Place | None = field(default=None, init=False)
    share: RunnerShare = field(init=False)  # its runs building at once (MAX_RUNS_PER_RUNNER)

    def __post_init__(self):
        self.name = self.name or self.settings.process_name
        if not self.warehouses:
            self.warehouses = load_warehouses(
                self.settings.warehouses_file, self.settings.default_duckdb
            )
        url = self.database_url or self.settings.database_url
        self.own_database = own_database.place_of_url(url) if url else None
        # A throwaway resolver: a host behind a reference is no secret to mask runner-wide.
        resolver = Resolver(load_variables(self.settings.variables_file))
        own_database.check(self.warehouses, self.own_database, resolver)
        self.containment = self.containment or Containment(self.settings)
        self.share = RunnerShare(self.settings.max_runs_per_runner)
        # Everything this runner publishes or logs passes the one masking function.
        self.bus.mask, self.bus.mask_line = self.masker.mask_bytes, self.masker.mask_line
        jlog.add_mask(self.masker.mask)

    def resolver(self) -> Resolver:
        """A resolver for one job; what it resolves is masked in all this runner publishes."""
        return Resolver(
            load_variables(self.settings.variables_file),
            masker=self.masker,
            project_env=self.settings.env_references,
        )
