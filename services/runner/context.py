"""What every runner handler needs: the bus, settings, warehouses and an identity."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

from services.runner.secrets import Resolver, load_variables
from services.runner.warehouses import Warehouse, load_warehouses
from shared.bus import Bus
from shared.config import Settings

__all__ = ["RunnerContext"]


@dataclass
class RunnerContext:
    bus: Bus
    settings: Settings
    warehouses: dict[str, Warehouse] = field(default_factory=dict)
    name: str = ""

    def __post_init__(self):
        self.name = (
            self.name or self.settings.runner_name or f"{socket.gethostname()}:{os.getpid()}"
        )
        if not self.warehouses:
            self.warehouses = load_warehouses(
                self.settings.warehouses_file, self.settings.default_duckdb
            )

    def resolver(self) -> Resolver:
        """A fresh resolver per job, so each job masks exactly the secrets it resolved."""
        return Resolver(load_variables(self.settings.variables_file))
