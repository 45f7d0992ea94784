import { render } from 'preact';
import { Build, JobBuild } from './build.jsx';
import { Layout } from './common.jsx';
import { Dashboard } from './dashboard.jsx';
import { Job, Resource } from './job.jsx';
import { FlySuccess, Login } from './login.jsx';
import { Pipeline } from './pipeline.jsx';
import { interceptLinks, match, pageQuery, useLocation, varsQuery } from './router.js';
import './style.css';

function App() {
  const loc = useLocation();
  const { name, params: p } = match(loc.split('?')[0]);
  const vq = varsQuery(loc.split('?')[1] || '');
  const pq = pageQuery(loc.split('?')[1] || '');
  switch (name) {
    case 'dashboard': return <Dashboard />;
    case 'hd': return <Dashboard hd />;
    case 'login': return <Login />;
    case 'flySuccess': return <FlySuccess />;
    case 'build': return <Build id={p[0]} />;
    case 'jobBuild': return <JobBuild team={p[0]} pipeline={p[1]} job={p[2]} name={p[3]} vq={vq} />;
    case 'job': return <Job team={p[0]} pipeline={p[1]} name={p[2]} vq={vq} pq={pq} />;
    case 'resource': return <Resource team={p[0]} pipeline={p[1]} name={p[2]} vq={vq} pq={pq} />;
    case 'pipeline': return <Pipeline key={loc} team={p[0]} name={p[1]} vq={vq} />;
    default: return <Layout crumbs={[['not found']]}><div class="error">no page here</div></Layout>;
  }
}

interceptLinks();
render(<App />, document.getElementById('app'));
