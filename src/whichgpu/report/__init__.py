"""Rendering: terminal tables (rich), stable JSON documents, HTML pages. The library never prints."""
