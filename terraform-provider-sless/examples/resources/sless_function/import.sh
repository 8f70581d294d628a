# By name (or namespace/name), in the token's namespace.
terraform import sless_function.example <name>
