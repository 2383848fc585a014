"""`whichgpu ui`: a local web app (Starlette, served by uvicorn) over the same calls as the CLI."""
