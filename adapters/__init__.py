"""One module per coding tool (an *adapter*), the shared base, the registry, and two wings.

A tool is its adapter: its files, owned keys, rendering, competing sources, one-shot command and install
package are declarations on one class (``base.Adapter``), and ``registry.ADAPTERS`` builds every table from them.
``writer/`` writes every file; ``formats/`` reads and edits the text formats. ``declarations`` and ``facts`` hold the
types adapters declare and report.
"""
