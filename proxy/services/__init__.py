"""The imperative shell: each module orchestrates core + store + upstream for one use case."""
