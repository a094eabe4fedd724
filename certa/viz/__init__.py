"""Pictures of programs and runs: graph and tree drawings (:mod:`~certa.viz.drawing`,
:mod:`~certa.viz.tree_drawing`), plots (:mod:`~certa.viz.plots`) and the live table of running
programs (:mod:`~certa.viz.live`). Each module imports matplotlib or IPython only when it draws."""
