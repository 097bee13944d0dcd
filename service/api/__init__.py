"""The HTTP service: FastAPI app (:func:`service.api.app.create_app`), routers, schemas, auth, metrics."""
