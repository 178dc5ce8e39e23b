// Command netpol enforces NetworkPolicy on the cws-kube cluster (scripts/kube.sh),
// whose bridge CNI accepts NetworkPolicies and enforces nothing: it runs the
// controller of sigs.k8s.io/kube-network-policies (what kind runs), which queues each
// new pod connection to userspace (nfqueue) and accepts or drops it by the policies.
// Built from the Go module proxy because no image registry is reachable here.
//
// The upstream command reads only in-cluster configuration, so it must run as a pod;
// this one takes a kubeconfig and runs on the host as the cluster's other parts do.
// It watches NetworkPolicies only (no admin network policies).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/kube-network-policies/pkg/networkpolicy"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the cluster")
	node := flag.String("node", "", "this node's name")
	queue := flag.Int("nfqueue-id", 98, "the nfqueue the packets go through")
	klog.InitFlags(nil)
	flag.Parse()
	if *kubeconfig == "" || *node == "" {
		fmt.Fprintln(os.Stderr, "usage: netpol --kubeconfig FILE --node NAME")
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		klog.Fatalf("kubeconfig %s: %v", *kubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(config)
	if err != nil {
		klog.Fatalf("client: %v", err)
	}
	f := informers.NewSharedInformerFactory(cs, 0)
	c, err := networkpolicy.NewController(cs, f.Networking().V1().NetworkPolicies(), f.Core().V1().Namespaces(),
		f.Core().V1().Pods(), nil, nil, nil, nil, networkpolicy.Config{QueueID: *queue, NodeName: *node, NetfilterBug1766Fix: true, FailOpen: true})
	if err != nil {
		klog.Fatalf("network policy controller: %v", err)
	}
	go func() {
		if err := c.Run(ctx); err != nil {
			klog.Errorf("network policy controller: %v", err)
			cancel()
		}
	}()
	f.Start(ctx.Done())
	<-ctx.Done()
}
