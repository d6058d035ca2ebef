"""Python access to reliabilityd: ``Client`` / ``AsyncClient`` to read, ``Emitter`` to send."""
