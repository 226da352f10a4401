"""An edgequal driver for labgrid's own pytest (``pytest --lg-env env.yaml``): a lab's
existing board tests qualify a model on the place's agent and get the library's
:class:`edgequal.Report`.

In the labgrid environment file, import this module and bind the driver to the place's
agent resource (a ``NetworkService`` whose ``address`` is the agent's URL)::

    imports:
      - edgequal.labgrid_driver
    targets:
      main:
        resources:
          RemotePlace:
            name: pi5-a
        drivers:
          EdgequalDriver: {}

    def test_classifier(target):
        edgequal = target.get_driver("EdgequalDriver")
        report = edgequal.qualify("model.onnx", golden="g.npz", plan="quick")
        assert report.status == "passed"

The device must be pinned on this host (``edgequal devices trust NAME ADDRESS``): it
proves that key before anything is sent, as for every other way in (docs/api.md).
"""

from __future__ import annotations

import attr
from labgrid.driver.common import Driver
from labgrid.factory import target_factory
from labgrid.step import step


@target_factory.reg_driver
@attr.s(eq=False)
class EdgequalDriver(Driver):
    """Qualify models on the agent a labgrid place holds (its ``NetworkService``)."""

    bindings = {"service": "NetworkService"}
    token_file = attr.ib(
        default=None, validator=attr.validators.optional(attr.validators.instance_of(str))
    )
    """A file holding the agent's token (else ``$EDGEQUAL_TOKEN`` or the device's entry)."""

    @property
    def address(self) -> str:
        """The agent's URL, as the place's resource names it."""
        return self.service.address

    @Driver.check_active
    @step(args=["model"])
    def qualify(self, model, golden=None, **kwargs):
        """``edgequal.connect(address).qualify(model, golden, **kwargs)``: a verified Report."""
        import edgequal

        with edgequal.connect(self.address, token_file=self.token_file) as device:
            return device.qualify(model, golden, **kwargs)
