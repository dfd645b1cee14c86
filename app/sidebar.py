"""The sidebar shared by every page: the environment (preset, fitted from results, or custom).

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


def _default(key: str, **default: object) -> dict:
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
            st.caption(env.source)
        return env
    if mode == "preset":
        names = cm.environments()
        key = _kept("env_preset")
        name = st.sidebar.selectbox("preset", names, key=key, on_change=_save, args=(key,),
                                    **_default(key, index=names.index("10GbE")))
        env = cm.environment(name)
        st.sidebar.caption(env.description)
        with st.sidebar.expander("numbers and their source"):
            st.write(env.summary())
            st.caption(env.source)
    else:
        def keep(key: str) -> dict:
            return {"key": _kept(key), "on_change": _save, "args": (key,)}

        alpha_us = st.sidebar.slider("alpha: latency (us)", 0.1, 200.0, step=0.1, **keep("env_alpha"),
                                     **_default("env_alpha", value=20.0))
        bw = st.sidebar.slider("bandwidth (GB/s)", 0.05, 500.0, step=0.01, **keep("env_bw"),
                               **_default("env_bw", value=1.177))
        gamma = st.sidebar.number_input("gamma (s per byte reduced)", 0.0, 1e-6, format="%.3e", **keep("env_gamma"),
                                        **_default("env_gamma", value=0.0))
        gpus = st.sidebar.number_input("GPUs per node", 1, 64, **keep("env_gpus"), **_default("env_gpus", value=1))
        kwargs = {"alpha": alpha_us * 1e-6, "beta": 1 / (bw * 1e9), "gamma": gamma, "name": "custom"}
        if gpus > 1:
            ia = st.sidebar.slider("intra-node alpha (us)", 0.1, 50.0, step=0.1, **keep("env_ialpha"),
                                   **_default("env_ialpha", value=1.0))
            ibw = st.sidebar.slider("intra-node bandwidth (GB/s)", 1.0, 1000.0, **keep("env_ibw"),
                                    **_default("env_ibw", value=240.0))
            if st.session_state.get("env_nics", 1) > int(gpus):
                choose(env_nics=int(gpus))
            nics = st.sidebar.number_input("NICs per node", 1, int(gpus), **keep("env_nics"),
                                           **_default("env_nics", value=1))
            kwargs.update(intra_alpha=ia * 1e-6, intra_beta=1 / (ibw * 1e9), gpus_per_node=int(gpus),
                          nics_per_node=int(nics))
        env = cm.Environment(**kwargs)
        st.sidebar.caption(env.summary())
    return env

