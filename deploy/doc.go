// Package deploy holds how cws is deployed: the service image (cws.Dockerfile), the
// compose stack's tenants and Redis image (compose/), the Prometheus configuration and
// the Grafana dashboard (prometheus/, grafana/), and the workspace images (images/).
// The Helm chart is in helm/cws and the compose file is docker-compose.yml, both at the
// repository root.
//
// It has no Go API. Its tests check the artefacts for real: they render the chart with
// helm, load the dashboard against the metrics cws exports, and run the compose stack.
package deploy
