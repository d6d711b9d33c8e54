"""The shared ground every room stands on: errors, redaction, failure classes, versions, the cache, the console
notice filter and MaxText's shipped files. Imports nothing of moekit but the package's version."""
