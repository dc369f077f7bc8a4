"""The helper process that runs Horovod's ElasticDriver for Horovod-mode elastic jobs: the driver
(elastic_driver.py), its hosts, its rendezvous server and its link to the launcher."""
