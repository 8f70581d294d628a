package browser

// The service-worker takeover of issue 14, attack 1: what a hostile function serves, for the
// tests on both control planes that it stays harmless.

// TakeoverPage is a function's page that tries to take over the gateway's origin: read the
// console's token from sessionStorage and register a service worker with scope "/" (its
// script is sent with Service-Worker-Allowed: /). The outcome goes into document.title.
const TakeoverPage = `<!doctype html><title>loading</title><script>
let out = [];
try { out.push("token:" + sessionStorage.getItem("sless.token")); } catch (e) { out.push("storage:" + e.name); }
try {
  navigator.serviceWorker.register("sw.js", {scope: "/"}).then(
    () => navigator.serviceWorker.ready.then(() => { document.title = out.join(" ") + " sw:registered"; }),
    (e) => { document.title = out.join(" ") + " sw:" + e.name; });
} catch (e) { document.title = out.join(" ") + " sw:" + e.name; }
</script>`

// TakeoverWorker answers every fetch in its scope with the attacker's page.
const TakeoverWorker = `self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (e) => e.waitUntil(clients.claim()));
self.addEventListener("fetch", (e) => e.respondWith(new Response("<title>pwned</title>", {headers: {"Content-Type": "text/html"}})));`
