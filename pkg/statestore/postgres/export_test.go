package postgres

// Migrations are the schema's steps, for a test that builds an old schema.
var Migrations = migrations
