"""The ``lia-spark`` command line, the entry of ``jobs/`` and the notebooks' helpers (:mod:`.main`), and each
command's help (:mod:`.command_help`). It sits above every other folder: nothing in the package imports it."""
