"""What a fresh Spark JVM runs before a pipeline's first run, so that the run does not
pay for the JVM's first Spark work: the engine's own story on a few throwaway rows
(`story.py`), which `make dev` sends to its new Spark Connect server and which the class
archive is built from (`class_archive_build.py`; the archive's use: `offset_assets.class_archive`)."""
