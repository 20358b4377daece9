/* The controller's dashboard: GET / serves one self-contained HTML page (no external assets: its
 * script and styles are inline, its charts are drawn on canvases) that polls GET /api/status,
 * the JSON rendered here from the same counters and snapshot as /metrics. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include "controller/ctl_metrics.h"

static double ld(const _Atomic uint64_t *c) { return (double)atomic_load_explicit(c, memory_order_relaxed); }

char *lm_met_status_json(const lm_met_counters *m, const lm_met_snapshot *s, uint64_t age_ms) {
  cJSON *r = cJSON_CreateObject();
  if (!r) return NULL;
  cJSON_AddStringToObject(r, "version", LOOM_VERSION_STRING);
  cJSON_AddNumberToObject(r, "snapshot_age_s", (double)age_ms / 1e3);
  cJSON *la = cJSON_AddObjectToObject(r, "launches");
  if (la) {
    cJSON_AddNumberToObject(la, "started", ld(&m->launches_started));
    cJSON_AddNumberToObject(la, "refused", ld(&m->launches_refused));
    cJSON_AddNumberToObject(la, "succeeded", ld(&m->launches_succeeded));
    cJSON_AddNumberToObject(la, "failed", ld(&m->launches_failed));
    cJSON_AddNumberToObject(la, "cancelled", ld(&m->launches_cancelled));
    cJSON_AddNumberToObject(la, "running", s ? s->launches_running : 0);
  }
  if (s) {
    cJSON_AddNumberToObject(r, "uptime_s", (double)s->uptime_ms / 1e3);
    cJSON_AddNumberToObject(r, "programs", s->programs);
    cJSON *ws = cJSON_AddArrayToObject(r, "workers");
    cJSON **devarr = calloc(s->nworkers ? s->nworkers : 1, sizeof *devarr); /* by worker id: its devices */
    for (uint32_t i = 0; ws && i < s->nworkers; i++) {
      const lm_met_worker *w = &s->workers[i];
      cJSON *o = cJSON_CreateObject();
      if (!o) break;
      cJSON_AddNumberToObject(o, "id", w->id);
      cJSON_AddStringToObject(o, "host", w->host);
      cJSON_AddNumberToObject(o, "pid", w->pid);
      cJSON_AddStringToObject(o, "slice", w->slice);
      cJSON_AddBoolToObject(o, "alive", w->alive);
      cJSON_AddStringToObject(o, "problem", w->problem);
      cJSON_AddNumberToObject(o, "heartbeat_age_s", (double)w->since_heartbeat_ms / 1e3);
      cJSON *ds = cJSON_AddArrayToObject(o, "devices");
      if (devarr && w->id < s->nworkers) devarr[w->id] = ds;
      cJSON_AddItemToArray(ws, o);
    }
    for (uint32_t j = 0; devarr && j < s->ndevices; j++) {
      const lm_met_device *d = &s->devices[j];
      cJSON *ds = d->worker < s->nworkers ? devarr[d->worker] : NULL;
      if (ds) {
        cJSON *x = cJSON_CreateObject();
        if (!x) break;
        cJSON_AddNumberToObject(x, "id", d->id);
        cJSON_AddNumberToObject(x, "local_index", d->local_index);
        cJSON_AddStringToObject(x, "kind", d->kind);
        cJSON_AddBoolToObject(x, "healthy", d->healthy);
        cJSON_AddNumberToObject(x, "memory_capacity", (double)d->capacity);
        cJSON_AddNumberToObject(x, "memory_used", (double)d->used);
        cJSON_AddItemToArray(ds, x);
      }
    }
    free(devarr);
    cJSON *ss = cJSON_AddArrayToObject(r, "sessions");
    for (uint32_t i = 0; ss && i < s->nsession_list; i++) {
      const lm_met_session *x = &s->session_list[i];
      cJSON *o = cJSON_CreateObject();
      if (!o) break;
      cJSON_AddNumberToObject(o, "id", (double)x->id);
      cJSON_AddStringToObject(o, "name", x->name);
      cJSON_AddStringToObject(o, "peer", x->peer);
      cJSON_AddStringToObject(o, "user", x->user);
      cJSON_AddNumberToObject(o, "age_s", (double)x->age_ms / 1e3);
      cJSON_AddNumberToObject(o, "running", x->running);
      cJSON_AddItemToArray(ss, o);
    }
    static const char *how[] = {"succeeded", "failed", "cancelled"};
    cJSON *rs = cJSON_AddArrayToObject(r, "recent");
    for (uint32_t i = 0; rs && i < s->nrecent; i++) {
      const lm_met_recent *x = &s->recent[i];
      cJSON *o = cJSON_CreateObject();
      if (!o) break;
      cJSON_AddNumberToObject(o, "seq", (double)x->seq);
      cJSON_AddNumberToObject(o, "session", (double)x->session);
      cJSON_AddStringToObject(o, "program", x->program);
      cJSON_AddNumberToObject(o, "devices", x->ndev);
      cJSON_AddNumberToObject(o, "latency_ms", (double)x->dur_ns / 1e6);
      cJSON_AddStringToObject(o, "state", x->outcome >= 0 && x->outcome < 3 ? how[x->outcome] : "?");
      cJSON_AddNumberToObject(o, "ended_s", (double)x->ended_ms / 1e3);
      cJSON_AddItemToArray(rs, o);
    }
  }
  char *out = cJSON_PrintUnformatted(r);
  cJSON_Delete(r);
  return out;
}

const char lm_dashboard_html[] =
    "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Loom</title>\n"
    "<style>\n"
    "body{font:14px system-ui,sans-serif;margin:16px;color:#222;background:#fafafa}\n"
    "h1{font-size:20px;margin:0 0 4px}h2{font-size:15px;margin:18px 0 6px}\n"
    "#status{color:#555}.bad{color:#b00}\n"
    ".slice{border:1px solid #ccc;border-radius:6px;padding:6px 10px;margin:6px 0;background:#fff}\n"
    ".worker{margin:4px 0}.worker.lost{opacity:.6}\n"
    ".device{display:inline-block;width:120px;margin:2px;padding:4px;border-radius:4px;font-size:12px}\n"
    ".device.healthy{background:#d8f0d8}.device.unhealthy{background:#f4d0d0}\n"
    ".bar{height:5px;background:#ddd;border-radius:2px}.bar div{height:5px;background:#3a7;border-radius:2px}\n"
    "table{border-collapse:collapse;background:#fff}td,th{border:1px solid #ddd;padding:2px 8px;text-align:left}\n"
    "canvas{background:#fff;border:1px solid #ccc;margin-right:12px}\n"
    "</style></head><body>\n"
    "<h1>Loom cluster</h1><div id=\"status\">loading&hellip;</div>\n"
    "<h2>Devices by slice and worker</h2><div id=\"devices\"></div>\n"
    "<h2>Launch rate (per second) and device memory in use</h2>\n"
    "<canvas id=\"rate\" width=\"420\" height=\"120\"></canvas><canvas id=\"mem\" width=\"420\" height=\"120\"></canvas>\n"
    "<h2>Sessions</h2><table id=\"sessions\"></table>\n"
    "<h2>Recent launches</h2><table id=\"recent\"></table>\n"
    "<p style=\"color:#777\">Also: <a href=\"/metrics\">/metrics</a> (Prometheus), /healthz, /readyz, "
    "<a href=\"/api/status\">/api/status</a> (this page's data).</p>\n"
    "<script>\n"
    "'use strict';\n"
    "const hist = {rate: [], mem: []}; let last = null;\n"
    "function esc(s){return String(s).replace(/[&<>\"']/g,c=>({'&':'&amp;','<':'&lt;','>':'&gt;','\"':'&quot;',\"'\":'&#39;'}[c]));}\n"
    "function size(b){const u=['B','KiB','MiB','GiB','TiB'];let i=0;while(b>=1024&&i<4){b/=1024;i++;}return b.toFixed(i?1:0)+' '+u[i];}\n"
    "function chart(id, pts, fmt){const c=document.getElementById(id),g=c.getContext('2d');g.clearRect(0,0,c.width,c.height);\n"
    "  const max=Math.max(1,...pts);g.strokeStyle='#37a';g.beginPath();\n"
    "  pts.forEach((v,i)=>{const x=i*(c.width-1)/59,y=c.height-10-(v/max)*(c.height-25);i?g.lineTo(x,y):g.moveTo(x,y);});g.stroke();\n"
    "  g.fillStyle='#444';g.fillText('max '+fmt(max)+'  now '+fmt(pts.length?pts[pts.length-1]:0),6,12);}\n"
    "function render(s){\n"
    "  const devs=s.workers.flatMap(w=>w.devices), ok=devs.filter(d=>d.healthy).length;\n"
    "  const used=devs.reduce((a,d)=>a+d.memory_used,0), cap=devs.reduce((a,d)=>a+d.memory_capacity,0);\n"
    "  const st=document.getElementById('status');\n"
    "  st.className=ok<devs.length?'bad':'';\n"
    "  st.textContent=`loom ${s.version}, up ${s.uptime_s.toFixed(0)} s: ${devs.length} devices (${ok} healthy) on ${s.workers.length} workers, `+\n"
    "    `${s.sessions.length} sessions, ${s.launches.running} launches running, ${s.launches.succeeded} succeeded, `+\n"
    "    `${s.launches.failed} failed, ${s.launches.cancelled} cancelled; memory ${size(used)} of ${size(cap)}`;\n"
    "  const slices={};s.workers.forEach(w=>(slices[w.slice]=slices[w.slice]||[]).push(w));\n"
    "  let h='';for(const [name,ws] of Object.entries(slices)){h+=`<div class=\"slice\"><b>slice ${esc(name)}</b>`;\n"
    "    for(const w of ws){h+=`<div class=\"worker ${w.alive?'alive':'lost'}\" data-worker=\"${w.id}\">worker ${w.id} `+\n"
    "      `(${esc(w.host)} pid ${w.pid}) ${w.alive?'alive':'<span class=\"bad\">lost: '+esc(w.problem)+'</span>'}<br>`;\n"
    "      for(const d of w.devices){const pct=d.memory_capacity?100*d.memory_used/d.memory_capacity:0;\n"
    "        h+=`<span class=\"device ${d.healthy?'healthy':'unhealthy'}\" data-device=\"${d.id}\">device ${d.id} `+\n"
    "          `(${esc(d.kind)}:${d.local_index})<br>${size(d.memory_used)} / ${size(d.memory_capacity)}`+\n"
    "          `<div class=\"bar\"><div style=\"width:${pct.toFixed(1)}%\"></div></div></span>`;}\n"
    "      h+='</div>';}h+='</div>';}\n"
    "  document.getElementById('devices').innerHTML=h;\n"
    "  document.getElementById('sessions').innerHTML='<tr><th>id</th><th>name</th><th>user</th><th>from</th><th>open</th><th>running</th></tr>'+\n"
    "    s.sessions.map(x=>`<tr><td>${x.id}</td><td>${esc(x.name)}</td><td>${esc(x.user)}</td><td>${esc(x.peer)}</td>`+\n"
    "      `<td>${x.age_s.toFixed(0)} s</td><td>${x.running}</td></tr>`).join('');\n"
    "  document.getElementById('recent').innerHTML='<tr><th>launch</th><th>program</th><th>session</th><th>devices</th><th>latency</th><th>state</th></tr>'+\n"
    "    s.recent.map(x=>`<tr><td>${x.seq}</td><td>${esc(x.program)}</td><td>${x.session}</td><td>${x.devices}</td>`+\n"
    "      `<td>${x.latency_ms.toFixed(3)} ms</td><td>${x.state}</td></tr>`).join('');\n"
    "  const done=s.launches.succeeded+s.launches.failed+s.launches.cancelled, now=performance.now();\n"
    "  if(last){hist.rate.push(Math.max(0,(done-last.done)/((now-last.t)/1000)));}\n"
    "  last={done,t:now};hist.mem.push(used);for(const k in hist)if(hist[k].length>60)hist[k].shift();\n"
    "  chart('rate',hist.rate,v=>v.toFixed(1));chart('mem',hist.mem,size);\n"
    "}\n"
    "async function tick(){try{const r=await fetch(location.origin+'/api/status',{cache:'no-store'});\n"
    "  if(r.status===401)throw new Error('the sign-in expired: reload the page');\n"
    "  if(!r.ok)throw new Error('HTTP '+r.status);render(await r.json());}\n"
    "  catch(e){const st=document.getElementById('status');st.className='bad';st.textContent='controller unreachable: '+e.message;}\n"
    "  setTimeout(tick,1000);}\n"
    "tick();\n"
    "</script></body></html>\n";
