"""Web-agent recipe (WebGym seeds 000 / 004): episodes, collector, store, metrics, loop."""
