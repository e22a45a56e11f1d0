"""Models: loading (embedded, hub, local), the hub, export of a merged model."""
