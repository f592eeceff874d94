"""Request and response schemas, one module per API family, after the message JSON files of apache/kafka."""
