"""One module per command; `register` composes them into the root app."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    from whichgpu.commands import (
        analyze,
        engines,
        estimate,
        fit,
        gpus,
        models,
        plan,
        recommend,
        serve,
        systems,
        ui,
        validate,
        validate_plan,
        validate_serve,
    )

    app.add_typer(gpus.app, name="gpus")
    models.register(app)
    engines.register(app)
    systems.register(app)
    analyze.register(app)
    estimate.register(app)
    fit.register(app)
    validate.register(app)
    recommend.register(app)
    plan.register(app)
    validate_plan.register(app)
    serve.register(app)
    validate_serve.register(app)
    ui.register(app)
