#!/bin/sh
# Spark 4 needs Java 17 or newer; say so plainly instead of letting the JVM launcher fail later.
java_bin="${JAVA_HOME:+$JAVA_HOME/bin/}java"
if ! command -v "$java_bin" >/dev/null 2>&1; then
  echo "error: Java not found. offset-assets runs Spark 4, which needs Java 17 or newer." >&2
  echo "       Install it (Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME." >&2
  exit 1
fi
version=$("$java_bin" -version 2>&1 | sed -n 's/.*version "\([0-9][0-9]*\).*/\1/p' | head -n 1)
if [ -z "$version" ] || [ "$version" -lt 17 ]; then
  echo "error: Java ${version:-unknown} found at $(command -v "$java_bin"); Spark 4 needs Java 17 or newer." >&2
  exit 1
fi
