"""The IPU methods Keras models get (``ipu_runtime.keras_extensions`` installs them): ``options``
(the ``set_*_options`` methods and the options they keep), ``stages`` (PipelineStage and the
stage assignment classes), ``pipeline_stages``, ``replicas`` (Graphcore's replica rule),
``data_adapter`` (each replica's input), ``train_function`` (the accumulating train function)
and ``extensions_base`` (the method list, fit / evaluate / predict included)."""
