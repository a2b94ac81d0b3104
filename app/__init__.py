"""The application: the services the CLI and the HTTP API share, the composition root, the CLI and the measuring tools."""
