"""Attempt: one cibuildwheel attempt as pure values: its configuration and in-container scripts
(config), the log it streams (buildlog), how it ended and why (outcome, diagnosis), and the labels
that say whose its container is (ownership). No Docker here: the engine runs and watches it."""
