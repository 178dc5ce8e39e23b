package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cwsdev/cws/sandbox/docker"
	"github.com/cwsdev/cws/sandbox/kube"
	"github.com/cwsdev/cws/sandbox/pool"
	"github.com/cwsdev/cws/workspace"
)

// The sandbox engines cws serve can drive.
const (
	driverDocker     = "docker"
	driverKubernetes = "kubernetes"
)

// engine is a sandbox driver as serve uses it: the Service's Sandboxes and Healer,
// plus its pool and its transport.
type engine interface {
	workspace.Sandboxes
	workspace.Healer
	RunPool(ctx context.Context)
	Transport() (name, why string)
	Close() error
}

var (
	_ engine = (*docker.Driver)(nil)
	_ engine = (*kube.Driver)(nil)
)

// newDriver makes the driver cfg.Driver names.
func newDriver(ctx context.Context, cfg Config, log *slog.Logger, obs pool.Observer) (engine, error) {
	switch cfg.Driver {
	case driverKubernetes:
		transport := cfg.KubeTransport
		if transport == "auto" {
			transport = kube.TransportAuto
		}
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		d, err := kube.New(ctx, kube.Config{Kubeconfig: cfg.Kubeconfig, Namespace: cfg.KubeNamespace,
			StorageClass: cfg.KubeStorageClass, AgentImage: cfg.KubeAgentImage, AgentBinary: cfg.AgentBinary,
			RuntimeClass: cfg.KubeRuntimeClass, UserNamespaces: cfg.KubeUserNamespaces, Transport: transport,
			RequestPercent: cfg.KubeRequestPercent, Instance: cfg.Instance, Log: log,
			Pool: cfg.pools, PoolMax: cfg.PoolMax, PoolOwner: cfg.PoolOwner, PoolObserver: obs})
		if err != nil {
			return nil, fmt.Errorf("%w (check the cluster with `kubectl --kubeconfig ... get pods -n %s`)", err, cfg.KubeNamespace)
		}
		return d, nil
	default:
		return docker.New(docker.Config{AgentBinary: cfg.AgentBinary, Log: log, Instance: cfg.Instance,
			Transport: cfg.AgentTransport, SocketDir: cfg.AgentSocketDir,
			Pool: cfg.pools, PoolMax: cfg.PoolMax, PoolOwner: cfg.PoolOwner, PoolObserver: obs})
	}
}
