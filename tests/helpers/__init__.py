"""Helper modules shared by the test folders, imported as `tests.helpers.NAME`."""
