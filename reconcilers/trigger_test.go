package reconcilers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	httpv1alpha1 "github.com/kedacore/http-add-on/operator/apis/http/v1alpha1"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "sless.dev/sless/apis/v1alpha1"
	"sless.dev/sless/scaling"
)

func newTrigger(ns, name, fn string, typ v1.TriggerType) *v1.Trigger {
	tr := &v1.Trigger{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1.TriggerSpec{Type: typ, FunctionRef: v1.LocalObjectReference{Name: fn}},
	}
	switch typ {
	case v1.TriggerCron:
		tr.Spec.Cron = &v1.CronSpec{Schedule: "*/5 * * * *", Timezone: "UTC"}
	case v1.TriggerEvent:
		tr.Spec.Event = &v1.EventSpec{Queue: "orders", BrokerSecretRef: v1.SecretKeyReference{Name: "amqp"}}
	}
	return tr
}

func waitTrigger(t *testing.T, tr *v1.Trigger, active bool, reason string) *v1.Trigger {
	t.Helper()
	got := &v1.Trigger{}
	eventually(t, fmt.Sprintf("trigger %s active=%v reason=%s", tr.Name, active, reason), func() error {
		if err := get(t, client.ObjectKeyFromObject(tr), got); err != nil {
			return err
		}
		var r string
		for _, c := range got.Status.Conditions {
			if c.Type == v1.ConditionReady {
				r = c.Reason
			}
		}
		if got.Status.Active != active || r != reason || got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("active=%v reason=%q status=%+v", got.Status.Active, r, got.Status)
		}
		return nil
	})
	return got
}

// createTriggers creates a cron (tick), an event (queue) and an http (web) trigger of fn,
// waiting until each is in the state given.
func createTriggers(t *testing.T, ns, fn string, active bool, reason string) (cron, event, web *v1.Trigger) {
	t.Helper()
	cron = newTrigger(ns, "tick", fn, v1.TriggerCron)
	event = newTrigger(ns, "queue", fn, v1.TriggerEvent)
	web = newTrigger(ns, "web", fn, v1.TriggerHTTP)
	if active { // the event trigger's broker URL
		create(t, apiSecret(ns, "amqp", 1, map[string]string{"host": "amqp://broker"}))
	}
	for _, tr := range []*v1.Trigger{cron, event, web} {
		create(t, tr)
		waitTrigger(t, tr, active, reason)
	}
	return cron, event, web
}

// TestTriggersCreatedBeforeTheFunctionStartByThemselves: triggers made before their function
// is Ready proceed once it is, with no further input.
func TestTriggersCreatedBeforeTheFunctionStartByThemselves(t *testing.T) {
	ns := newNamespace(t)
	cron, event, web := createTriggers(t, ns, "late", false, "FunctionNotFound")
	fn := newFunction(ns, "late", "5")
	create(t, fn)
	waitTrigger(t, cron, false, "FunctionNotReady")
	finishJob(t, waitBuildJob(t, ns, "late", "5"), true, "")
	waitFunction(t, fn, v1.FunctionReady)

	waitTrigger(t, cron, true, "Active")
	cj := &batchv1.CronJob{}
	if err := get(t, client.ObjectKey{Namespace: ns, Name: scaling.CronJobName("tick")}, cj); err != nil {
		t.Fatal(err)
	}
	if cj.Spec.Schedule != "*/5 * * * *" || *cj.Spec.Suspend || !metav1.IsControlledBy(cj, cron) {
		t.Errorf("cronjob = %+v owners %+v", cj.Spec, cj.OwnerReferences)
	}
	// The broker URL comes from a secret of the secrets API only, with the key named.
	plain := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "amqp", Namespace: ns}, StringData: map[string]string{"host": "amqp://broker"}}
	create(t, plain)
	brokerMessage(t, event, `broker_secret: secret "amqp" does not exist`)
	if err := env.Client.Delete(context.Background(), plain); err != nil {
		t.Fatal(err)
	}
	broker := apiSecret(ns, "amqp", 1, map[string]string{"url": "amqp://broker"})
	create(t, broker)
	brokerMessage(t, event, `secret "amqp" has no key "host" (it has url): add the key or change broker_secret_key`)
	update(t, broker, func() { broker.Data = map[string][]byte{"host": []byte("amqp://broker")} })
	waitTrigger(t, event, true, "Active")
	sj := &kedav1alpha1.ScaledJob{}
	if err := get(t, client.ObjectKey{Namespace: ns, Name: scaling.ScaledJobName("queue")}, sj); err != nil {
		t.Fatal(err)
	}
	if !metav1.IsControlledBy(sj, event) {
		t.Errorf("scaledjob owners %+v", sj.OwnerReferences)
	}
	if err := get(t, client.ObjectKey{Namespace: ns, Name: scaling.TriggerAuthenticationName(event)}, &kedav1alpha1.TriggerAuthentication{}); err != nil {
		t.Errorf("trigger authentication: %v", err)
	}
	got := waitTrigger(t, web, true, "Active")
	if got.Status.URL != opts.GatewayURL+"/fn/"+ns+"/late" {
		t.Errorf("http trigger url %q", got.Status.URL)
	}
}

// brokerMessage waits for tr to be SecretNotFound with a message holding want.
func brokerMessage(t *testing.T, tr *v1.Trigger, want string) {
	t.Helper()
	eventually(t, "trigger "+tr.Name+": "+want, func() error {
		got := &v1.Trigger{}
		if err := get(t, client.ObjectKeyFromObject(tr), got); err != nil {
			return err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, v1.ConditionReady)
		if c == nil || c.Reason != v1.ReasonSecretNotFound || !strings.Contains(c.Message, want) || got.Status.Active {
			return fmt.Errorf("ready condition %+v", c)
		}
		return nil
	})
}

// TestEnabledFreezesInPlace: enabled=false pauses/suspends the very same objects (same UID),
// and true resumes them; nothing is deleted and re-created.
func TestEnabledFreezesInPlace(t *testing.T) {
	ns := newNamespace(t)
	readyFunction(t, ns, "toggle", "6")
	cron, event, web := createTriggers(t, ns, "toggle", true, "Active")
	cjKey := client.ObjectKey{Namespace: ns, Name: scaling.CronJobName("tick")}
	sjKey := client.ObjectKey{Namespace: ns, Name: scaling.ScaledJobName("queue")}
	hsoKey := client.ObjectKey{Namespace: ns, Name: "toggle-1"}
	cj, sj, hso := &batchv1.CronJob{}, &kedav1alpha1.ScaledJob{}, &httpv1alpha1.HTTPScaledObject{}
	for key, obj := range map[client.ObjectKey]client.Object{cjKey: cj, sjKey: sj, hsoKey: hso} {
		if err := get(t, key, obj); err != nil {
			t.Fatal(err)
		}
	}
	uids := []string{string(cj.UID), string(sj.UID), string(hso.UID)}

	setEnabled := func(tr *v1.Trigger, enabled bool) {
		t.Helper()
		update(t, tr, func() { tr.Spec.Enabled = ptr.To(enabled) })
	}
	frozen := func(want bool) func() error {
		return func() error {
			_ = get(t, cjKey, cj)
			_ = get(t, sjKey, sj)
			_ = get(t, hsoKey, hso)
			got := [3]bool{*cj.Spec.Suspend, sj.Annotations[scaling.AnnotationPaused] == "true", hso.Annotations[scaling.AnnotationPausedReplicas] == "0"}
			if got != [3]bool{want, want, want} {
				return fmt.Errorf("cron suspended, scaledjob paused, http paused = %v, want all %v", got, want)
			}
			if now := []string{string(cj.UID), string(sj.UID), string(hso.UID)}; fmt.Sprint(now) != fmt.Sprint(uids) {
				return fmt.Errorf("objects were re-created: %v -> %v", uids, now)
			}
			return nil
		}
	}
	for _, tr := range []*v1.Trigger{cron, event, web} {
		setEnabled(tr, false)
	}
	eventually(t, "frozen", frozen(true))
	waitTrigger(t, cron, false, "Disabled")
	for _, tr := range []*v1.Trigger{cron, event, web} {
		setEnabled(tr, true)
	}
	eventually(t, "resumed", frozen(false))
	waitTrigger(t, web, true, "Active")
}

// TestCronPrewarm: a cron trigger with prewarmSeconds makes the operator request the
// function's health path through the interceptor, with the routing host of each revision
// that has its traffic, before the tick; one without does not.
func TestCronPrewarm(t *testing.T) {
	ns := newNamespace(t)
	warm := readyFunction(t, ns, "warm", "e")
	readyFunction(t, ns, "cold", "f")
	for _, tr := range []*v1.Trigger{newTrigger(ns, "warm-tick", "warm", v1.TriggerCron), newTrigger(ns, "cold-tick", "cold", v1.TriggerCron)} {
		tr.Spec.Cron.Schedule = "* * * * *"
		if tr.Name == "warm-tick" {
			tr.Spec.Cron.PrewarmSeconds = 59 // the window [tick-59s, tick+15s] covers every moment
		}
		create(t, tr)
	}
	warmHost, coldHost := "warm-1."+ns+".rev."+opts.Domain, "cold-1."+ns+".rev."+opts.Domain
	eventually(t, "a pre-warm request for "+warm.Name, func() error {
		if _, ok := warmed.Load(warmHost + "/healthz"); !ok {
			return fmt.Errorf("no request with host %s", warmHost)
		}
		return nil
	})
	time.Sleep(3 * time.Second)
	if _, ok := warmed.Load(coldHost + "/healthz"); ok {
		t.Error("a trigger without prewarmSeconds warmed its function")
	}
}
