"""A toy formulation, the worked example of docs/development.md ("How to add a formulation")."""
