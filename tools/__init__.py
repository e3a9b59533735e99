"""Repository maintenance commands, outside the runtime package: the generated YAMLs and tables
(variant_configs, config_table, generated_files) and the weight converter (convert_weights)."""
