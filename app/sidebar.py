"""The sidebar shared by every page: the environment (preset, fitted from results, or custom).

"custom" also sets the interference factors ``kappa_c``, ``kappa_m``, the host overhead per message and the
contended step (a message's least time per latency step beside compute); a
preset's or fitted environment's are shown with its numbers.

"fitted" lists the environments fitted to the shipped reference measurements
(``runners/reference/validation/<link>/environment.json``) and those fitted in this session on the
Environments page, which stores them as JSON under ``st.session_state[FITTED_KEY][name]``.

Every page calls :func:`environment_picker` first. Streamlit forgets a widget's value when a page
without it runs, so the values are also kept under shadow keys and restored on the next page.
(The picker lives in the pages rather than in ``main.py`` because Streamlit's AppTest drops
sidebar widgets of the navigation entry point on reruns.)
"""

from __future__ import annotations

import streamlit as st

import costmodels as cm
from app.data_iteration import terms_text

_KEEP = "_keep_"
FITTED_KEY = "fitted_envs"  # name -> Environment JSON, added by the Environments page


@st.cache_data(show_spinner=False)
def shipped_fitted() -> dict[str, str]:
    """The environments fitted to the shipped reference run: name -> JSON."""
    from runners import reference

    out = {}
    for path in sorted(reference.VALIDATION_DIR.glob("*/environment.json")):
        out[f"reference {path.parent.name} (4 CPU ranks, emulated link)"] = path.read_text()
    return out


def fitted_environments() -> dict[str, str]:
    """Shipped and session-fitted environments: name -> JSON (session ones last, newest wins)."""
    return {**shipped_fitted(), **st.session_state.get(FITTED_KEY, {})}


def _kept(key: str) -> str:
    """Restore a widget's value from its shadow (the last value the user chose on any page); return its key.

    Streamlit drops or ignores a widget's state when a page without the widget runs, so the shadow
    ``_keep_<key>`` is the value of record: widgets write it in ``on_change`` (:func:`_save`, run
    before the script) and every page restores it before drawing the widget.
    """
    if _KEEP + key in st.session_state:
        st.session_state[key] = st.session_state[_KEEP + key]
    return key


def _save(key: str) -> None:
    st.session_state[_KEEP + key] = st.session_state[key]


def initial(key: str, **default: object) -> dict:
    """The widget's default value, only where the session has none (no 'set twice' warning)."""
    return {} if key in st.session_state else default


def choose(**values: str) -> None:
    """Set sidebar controls from a page (e.g. ``choose(env_mode="fitted", env_fitted=name)``)."""
    for key, value in values.items():
        st.session_state[key] = value
        st.session_state[_KEEP + key] = value


def _keep_all() -> None:
    for key in list(st.session_state):
        if isinstance(key, str) and key.startswith("env_"):
            st.session_state[_KEEP + key] = st.session_state[key]


def environment_picker() -> cm.Environment:
    """Render the environment controls in the sidebar and return (and remember) the choice."""
    env = _render()
    _keep_all()
    return env


def _render() -> cm.Environment:
    st.sidebar.header("Environment")
    mode = st.sidebar.radio("source", ["preset", "fitted", "custom"], horizontal=True, key=_kept("env_mode"),
                            on_change=_save, args=("env_mode",))
    if mode == "fitted":
        fitted = fitted_environments()
        if not fitted:
            st.sidebar.warning("No fitted environments: fit one on the Environments page.")
            return cm.environment("10GbE")
        key = _kept("env_fitted")
        if st.session_state.get(key) not in fitted:
            st.session_state.pop(key, None)
        name = st.sidebar.selectbox("fitted environment", list(fitted), key=key, on_change=_save, args=(key,))
        env = cm.Environment.from_json(fitted[name])
        st.sidebar.caption(env.description)
        with st.sidebar.expander("numbers and their source"):
            st.write(env.summary())
            st.write(terms_text(env))
            st.caption(env.source)
        return env
    if mode == "preset":
        names = cm.environments()
        key = _kept("env_preset")
        name = st.sidebar.selectbox("preset", names, key=key, on_change=_save, args=(key,),
                                    **initial(key, index=names.index("10GbE")))
        env = cm.environment(name)
        st.sidebar.caption(env.description)
        with st.sidebar.expander("numbers and their source"):
            st.write(env.summary())
            st.write(terms_text(env))
            st.caption(env.source)
    else:
        def keep(key: str) -> dict:
            return {"key": _kept(key), "on_change": _save, "args": (key,)}

        alpha_us = st.sidebar.slider("alpha: latency (us)", 0.1, 200.0, step=0.1, **keep("env_alpha"),
                                     **initial("env_alpha", value=20.0))
        bw = st.sidebar.slider("bandwidth (GB/s)", 0.05, 500.0, step=0.01, **keep("env_bw"),
                               **initial("env_bw", value=1.177))
        gamma = st.sidebar.number_input("gamma (s per byte reduced)", 0.0, 1e-6, format="%.3e", **keep("env_gamma"),
                                        **initial("env_gamma", value=0.0))
        gpus = st.sidebar.number_input("GPUs per node", 1, 64, **keep("env_gpus"), **initial("env_gpus", value=1))
        kwargs = {"alpha": alpha_us * 1e-6, "beta": 1 / (bw * 1e9), "gamma": gamma, "name": "custom"}
        if gpus > 1:
            ia = st.sidebar.slider("intra-node alpha (us)", 0.1, 50.0, step=0.1, **keep("env_ialpha"),
                                   **initial("env_ialpha", value=1.0))
            ibw = st.sidebar.slider("intra-node bandwidth (GB/s)", 1.0, 1000.0, **keep("env_ibw"),
                                    **initial("env_ibw", value=240.0))
            kwargs.update(intra_alpha=ia * 1e-6, intra_beta=1 / (ibw * 1e9), gpus_per_node=int(gpus))
        with st.sidebar.expander("library and fabric"):
            fabric = _fabric(int(gpus), keep)
        with st.sidebar.expander("interference and host overhead"):
            kwargs.update(_terms(keep))
        try:
            env = cm.Environment(**kwargs, **fabric)
        except cm.CommscopeError as exc:  # the widgets' bounds should prevent it; never a traceback
            st.sidebar.warning(f"Library and fabric left out: {exc}")
            env = cm.Environment(**kwargs)
        st.sidebar.caption(env.summary())
    return env


def _terms(keep) -> dict:
    """The custom environment's interference factors and per-message host overhead (0: the alpha-beta model)."""
    kc = st.number_input("kappa_c: compute slowdown while a collective is in flight", 0.0, 10.0, step=0.05,
                         format="%.3f", **keep("env_kappa_c"), **initial("env_kappa_c", value=0.0),
                         help="Compute runs 1 + kappa_c times slower while a collective is in flight (NCCL kernels "
                              "take SMs and memory bandwidth; gloo's threads take cores).")
    km = st.number_input("kappa_m: communication slowdown while compute runs", 0.0, 10.0, step=0.05,
                         format="%.3f", **keep("env_kappa_m"), **initial("env_kappa_m", value=0.0),
                         help="Communication runs 1 + kappa_m times slower while compute runs.")
    o_us = st.number_input("host overhead o (us per message)", 0.0, 10000.0, step=1.0, format="%.2f",
                           **keep("env_overhead"), **initial("env_overhead", value=0.0),
                           help="Seconds of the issuing thread per message (LogP's o, Culler et al. 1993). A "
                                "fitted price already holds it (the sweep times blocking calls), so the link "
                                "holds a message for its price less o: a blocking chain costs the same, an "
                                "overlapped issue hides it.")
    step_ms = st.number_input("contended step (ms per latency step beside compute)", 0.0, 1000.0, step=0.5,
                              format="%.2f", **keep("env_contended_step"),
                              **initial("env_contended_step", value=0.0),
                              help="The least time one latency step of a message takes while compute runs beside "
                                   "it: CPU ranks sharing their cores wait for a core at every step (about 4-21 ms "
                                   "on 4 gloo ranks over 2 cores, bench/results/bench_overlap_*). A message of S "
                                   "steps then takes at least S times this beside compute; 0 on GPUs.")
    loss_ms = st.number_input("compute lost (ms per latency step of a message on an idle link)", 0.0, 1000.0,
                              step=0.05, format="%.2f", **keep("env_compute_loss_step"),
                              **initial("env_compute_loss_step", value=0.0),
                              help="The compute a rank loses per latency step of a message that meets an idle link "
                                   "beside it: CPU ranks sharing their cores run each step's system calls and "
                                   "wake-ups on the computing cores (the sweep's CPU per step x ranks / cores: "
                                   "about 0.5 ms on 4 gloo ranks over 2 cores); a message queued behind another "
                                   "takes none; 0 on GPUs.")
    st.caption("0, 0, 0, 0, 0: communication overlaps compute for free, as the alpha-beta model has it.")
    copy = _per_byte("host copy (ns/B of gloo's own buffers)", "env_host_copy", keep,
                     "gloo's reduce_scatter clones its input and copies the shard out; its all_gather copies the "
                     "result out of a buffer of its own: (n + n/p) and n bytes at this cost ('commscope bench "
                     "host-buffers' measures it: 0.08-0.19 on 4 ranks over 2 cores).")
    fault = _per_byte("host fault (ns/B more for a buffer mapped afresh, from 32 MiB)", "env_host_fault", keep,
                      "glibc maps an allocation of 32 MiB or more afresh on every call, every 4 KiB page faulting: "
                      "the reduce_scatter's clone pays this per byte (0.75-0.95 measured on 4 ranks over 2 cores).")
    return {"kappa_c": float(kc), "kappa_m": float(km), "host_overhead": float(o_us) * 1e-6,
            "contended_step": float(step_ms) * 1e-3, "compute_loss_step": float(loss_ms) * 1e-3,
            "host_copy": copy, "host_fault": fault}


def _per_byte(label: str, key: str, keep, help_: str) -> float:
    """A per-byte cost entered in ns/B (0-100), returned in s/B."""
    value = st.number_input(label, 0.0, 100.0, step=0.05, format="%.3f", **keep(key), **initial(key, value=0.0),
                            help=help_)
    return float(value) * 1e-9


LINK_LABELS = {"network": "network (NICs, switches)", "nvlink": "NVLink", "pcie": "PCIe"}
# compute capability -> what has it; 0: not given (NCCL's model then assumes 8.0; a selectbox shows None as empty)
GPUS = {0: "not given (as 8.0)", 70: "7.0 (V100)", 75: "7.5 (T4, RTX 20)", 80: "8.0 (A100)",
        86: "8.6 (A10, RTX 30)", 89: "8.9 (L4, L40, RTX 40)", 90: "9.0 (H100, H200)", 100: "10.0 (B200)"}


def _fabric(gpus: int, keep) -> dict:
    """The custom environment's library, link kinds, GPU and fabric: only the controls that mean something
    for its levels (the links present, the fat tree when the link is a network)."""
    libraries = cm.libraries()
    library = st.selectbox("collective library", libraries, **keep("env_library"),
                           **initial("env_library", index=libraries.index("ideal")),
                           help="What chooses each message's algorithm: NCCL's tuning model, gloo's or MPICH's "
                                "rules, or 'ideal' (the cheapest registered algorithm, which no library does).")
    kinds = list(LINK_LABELS)
    link = st.selectbox("link between nodes" if gpus > 1 else "link", kinds, format_func=LINK_LABELS.get,
                        **keep("env_link"), **initial("env_link", index=0),
                        help="A one-level NVLink or PCIe environment is one node; the kind sets NCCL's latency "
                             "class (NET, NVLINK, PCI).")
    out: dict = {"library": library, "link": link}
    if gpus > 1:
        out["intra_link"] = st.selectbox("link inside a node", kinds, format_func=LINK_LABELS.get,
                                         **keep("env_intra_link"), **initial("env_intra_link", index=1))
        if st.session_state.get("env_nics", 1) > gpus:
            choose(env_nics=gpus)
        out["nics_per_node"] = int(st.number_input("NICs per node", 1, gpus, **keep("env_nics"),
                                                   **initial("env_nics", value=1)))
    cc = list(GPUS)
    out["compute_capability"] = st.selectbox("GPU (compute capability)", cc, format_func=GPUS.get,
                                             **keep("env_cc"), **initial("env_cc", index=0),
                                             help="NCCL's per-architecture limits: LL128 on 7.0, 8.0, 9.0 "
                                                  "with NVLink; its bandwidth caps per generation.") or None
    if link == "network":
        oversub = st.number_input("oversubscription (fat tree, down:up)", 1.0, 64.0, step=0.5,
                                  **keep("env_oversub"), **initial("env_oversub", value=1.0),
                                  help="1: full bisection. Traffic that crosses the spine gets 1/oversubscription "
                                       "of a node's bandwidth.")
        out["oversubscription"] = float(oversub)
        if oversub > 1:
            leaf = int(st.number_input("nodes per leaf switch (0: all cross the spine)", 0, 65536,
                                       **keep("env_leaf"), **initial("env_leaf", value=0)))
            out["nodes_per_leaf"] = leaf or None
            if out.get("nics_per_node", 1) > 1:
                out["rail_optimized"] = st.checkbox("rail-optimised (NIC k of every node on leaf k)",
                                                    **keep("env_rail"), **initial("env_rail", value=False))
        out["sharp"] = st.checkbox("SHARP (in-network reduction: NCCL's CollNet)", **keep("env_sharp"),
                                   **initial("env_sharp", value=False))
    if (out.get("intra_link") if gpus > 1 else link) == "nvlink":
        out["nvls"] = st.checkbox("NVLink SHARP switches (NCCL's NVLS)", **keep("env_nvls"),
                                  **initial("env_nvls", value=False))
    st.caption("The GPU and the fabric shape NCCL's choice and price; the other libraries see the links' "
               "alpha and beta only.")
    return out


def library_select(where, key: str, env: cm.Environment, label: str = "library") -> str:
    """A page's collective-library selectbox (in the container ``where``): it starts at, and follows, the
    environment's library; a library chosen on the page holds until the environment's library changes."""
    libraries = cm.libraries()
    mark = f"{key}_follows"
    linked = st.session_state.pop(f"{key}_url", None)  # a link's choice (app.urlstate) holds like a page's
    if linked in libraries:
        st.session_state[key] = linked
    elif st.session_state.get(mark) != env.library or st.session_state.get(key) not in libraries:
        st.session_state[key] = env.library
    st.session_state[mark] = env.library
    return where.selectbox(label, libraries, key=key,
                           format_func=lambda n: f"{n} (the environment's)" if n == env.library else n,
                           help="The collective library that chooses each message's algorithm and protocol: "
                                "NCCL's tuning model, gloo's or MPICH's rules, or 'ideal' (the cheapest "
                                "registered algorithm at every size, which no library does).")

