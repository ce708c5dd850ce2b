"""What the tests share: helpers (paths, texts, apptest, tiny_models, browser, room_walk, cli, markdown_links,
batching, disk) and, as pytest plugins loaded by tests/conftest.py, the fixtures (model_fixtures, app_fixtures), the
tiers and Hypothesis's profiles. No test file imports another."""
