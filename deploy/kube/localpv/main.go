// Command localpv is the dynamic provisioner of the local cluster that `make kube`
// starts (scripts/kube.sh runs it): for every claim of a storage class whose
// provisioner is cws.dev/local-dir it makes a directory on this node and a hostPath
// PersistentVolume bound to the claim, and it deletes both once the claim is gone.
//
// Why not kube-controller-manager's own hostpath provisioner: it makes each volume's
// directory root-owned with mode 0750, and kubelet applies no fsGroup to hostPath
// volumes, so a pod that runs as a non-root uid (every cws session does) could not
// write its workspace. localpv makes the directories 0777 (sticky off): fine on a
// single-node test cluster, where every pod is ours; not a production provisioner.
//
//	localpv --kubeconfig FILE --dir /var/lib/cws-kube/pv [--every 1s]
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Provisioner is the provisioner name a StorageClass gives to use localpv.
const Provisioner = "cws.dev/local-dir"

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster")
	dir := flag.String("dir", "/var/lib/cws-kube/pv", "directory that holds the volumes")
	every := flag.Duration("every", time.Second, "how often claims and volumes are looked at")
	flag.Parse()
	rc, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatalf("localpv: %v", err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		log.Fatalf("localpv: %v", err)
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		log.Fatalf("localpv: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log.Printf("localpv: provisioning %s volumes under %s", Provisioner, *dir)
	t := time.NewTicker(*every)
	defer t.Stop()
	for {
		if err := pass(ctx, cs, *dir); err != nil && ctx.Err() == nil {
			log.Printf("localpv: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pass provisions the pending claims of our classes and deletes our released volumes.
func pass(ctx context.Context, cs kubernetes.Interface, dir string) error {
	classes, err := cs.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	ours := map[string]bool{}
	for _, c := range classes.Items {
		if c.Provisioner == Provisioner {
			ours[c.Name] = true
		}
	}
	claims, err := cs.CoreV1().PersistentVolumeClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, c := range claims.Items {
		if c.Spec.StorageClassName == nil || !ours[*c.Spec.StorageClassName] || c.Spec.VolumeName != "" ||
			c.Status.Phase != corev1.ClaimPending || c.DeletionTimestamp != nil {
			continue
		}
		if err := provision(ctx, cs, dir, c); err != nil {
			log.Printf("localpv: claim %s/%s: %v", c.Namespace, c.Name, err)
		}
	}
	pvs, err := cs.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, pv := range pvs.Items {
		if pv.Annotations["pv.kubernetes.io/provisioned-by"] != Provisioner {
			continue
		}
		if pv.Status.Phase != corev1.VolumeReleased && pv.Status.Phase != corev1.VolumeFailed {
			continue
		}
		if pv.Spec.HostPath != nil && filepath.Dir(pv.Spec.HostPath.Path) == filepath.Clean(dir) {
			if err := os.RemoveAll(pv.Spec.HostPath.Path); err != nil {
				log.Printf("localpv: remove %s: %v", pv.Spec.HostPath.Path, err)
				continue
			}
		}
		if err := cs.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			log.Printf("localpv: delete volume %s: %v", pv.Name, err)
			continue
		}
		log.Printf("localpv: deleted %s (claim %s/%s gone)", pv.Name, pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name)
	}
	return nil
}

func provision(ctx context.Context, cs kubernetes.Interface, dir string, c corev1.PersistentVolumeClaim) error {
	path := filepath.Join(dir, string(c.UID))
	if err := os.MkdirAll(path, 0o777); err != nil {
		return err
	}
	if err := os.Chmod(path, 0o777); err != nil { // past the umask
		return err
	}
	size := c.Spec.Resources.Requests[corev1.ResourceStorage]
	hostPathType := corev1.HostPathDirectory
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "localpv-" + string(c.UID),
			Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": Provisioner}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   c.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              *c.Spec.StorageClassName,
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: c.Namespace, Name: c.Name, UID: c.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &hostPathType}},
		},
	}
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create volume: %w", err)
	}
	log.Printf("localpv: %s/%s → %s (%s)", c.Namespace, c.Name, pv.Name, path)
	return nil
}
