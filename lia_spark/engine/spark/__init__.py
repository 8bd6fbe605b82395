"""Spark itself: the session and its settings (:mod:`.session`), files on any Hadoop path (:mod:`.filesystem`) and
the executors' Python check (:mod:`.deployment`). The only modules of the package that reach the JVM; they import
nothing else of the engine."""
