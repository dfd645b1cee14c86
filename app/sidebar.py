"""The sidebar shared by every page: the environment (preset, or custom alpha/beta/gamma)."""

from __future__ import annotations

import streamlit as st

import costmodels as cm

ENV_KEY = "commscope_environment"


def environment_picker() -> cm.Environment:
    """Render the environment controls and remember the choice for the pages."""
    st.sidebar.header("Environment")
    mode = st.sidebar.radio("source", ["preset", "custom"], horizontal=True, key="env_mode")
    if mode == "preset":
        names = cm.environments()
        name = st.sidebar.selectbox("preset", names, index=names.index("10GbE"), key="env_preset")
        env = cm.environment(name)
        st.sidebar.caption(env.description)
        with st.sidebar.expander("numbers and their source"):
            st.write(env.summary())
            st.caption(env.source)
    else:
        alpha_us = st.sidebar.slider("alpha: latency (us)", 0.1, 200.0, 20.0, step=0.1, key="env_alpha")
        bw = st.sidebar.slider("bandwidth (GB/s)", 0.05, 500.0, 1.177, step=0.01, key="env_bw")
        gamma = st.sidebar.number_input("gamma (s per byte reduced)", 0.0, 1e-6, 0.0, format="%.3e", key="env_gamma")
        gpus = st.sidebar.number_input("GPUs per node", 1, 64, 1, key="env_gpus")
        kwargs = {"alpha": alpha_us * 1e-6, "beta": 1 / (bw * 1e9), "gamma": gamma, "name": "custom"}
        if gpus > 1:
            ia = st.sidebar.slider("intra-node alpha (us)", 0.1, 50.0, 1.0, step=0.1, key="env_ialpha")
            ibw = st.sidebar.slider("intra-node bandwidth (GB/s)", 1.0, 1000.0, 240.0, key="env_ibw")
            nics = st.sidebar.number_input("NICs per node", 1, int(gpus), 1, key="env_nics")
            kwargs.update(intra_alpha=ia * 1e-6, intra_beta=1 / (ibw * 1e9), gpus_per_node=int(gpus),
                          nics_per_node=int(nics))
        env = cm.Environment(**kwargs)
        st.sidebar.caption(env.summary())
    st.session_state[ENV_KEY] = env
    return env


def current_environment() -> cm.Environment:
    """The environment chosen in the sidebar (10GbE before the sidebar has run)."""
    return st.session_state.get(ENV_KEY) or cm.environment("10GbE")
